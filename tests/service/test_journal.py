"""The job journal's files: what a restarted scheduler reads back (the restart itself: test_service_cluster.py)."""

import json

import pytest

from taodist.service import JobError, journal


def test_records_and_logs_read_back_oldest_first_skipping_what_a_crash_cut_short(tmp_path, monkeypatch):
    monkeypatch.setenv(journal.JOURNAL_VARIABLE, str(tmp_path / "j"))
    assert journal.write_record("20260101-000002-bbbb", {"id": "20260101-000002-bbbb", "state": "queued",
                                                        "submitted": 2.0})
    journal.write_record("20260101-000001-aaaa", {"id": "20260101-000001-aaaa", "state": "running", "submitted": 1.0})
    journal.write_record("20260101-000001-aaaa", {"id": "20260101-000001-aaaa", "state": "finished",
                                                 "submitted": 1.0})  # replaced, not appended
    journal.append_log("20260101-000001-aaaa", 10.0, "started on tcp://w:1")
    journal.append_log("20260101-000001-aaaa", 11.0, "model written to m.npz")
    with open(tmp_path / "j" / "20260101-000001-aaaa.log", "a") as f:
        f.write('[12.0, "cut sh')  # the machine died mid-line
    (tmp_path / "j" / "20260101-000003-cccc.json").write_text('{"id": "20260101-000003-cc')  # cut short
    (tmp_path / "j" / "notes.json").write_text(json.dumps({"id": "../../etc"}))  # not a job id
    jobs = journal.read_journal()
    assert [(r["id"], r["state"]) for r, _ in jobs] == [("20260101-000001-aaaa", "finished"),
                                                         ("20260101-000002-bbbb", "queued")]
    assert jobs[0][1] == [(10.0, "started on tcp://w:1"), (11.0, "model written to m.npz")] and jobs[1][1] == []
    assert not list((tmp_path / "j").glob("*.tmp"))


def test_without_a_journal_nothing_is_written_and_ids_never_become_paths(tmp_path, monkeypatch):
    monkeypatch.delenv(journal.JOURNAL_VARIABLE, raising=False)
    assert journal.write_record("20260101-000001-aaaa", {"id": "x"}) is False
    assert journal.append_log("20260101-000001-aaaa", 1.0, "line") is False and journal.read_journal() == []
    monkeypatch.setenv(journal.JOURNAL_VARIABLE, str(tmp_path))
    with pytest.raises(ValueError, match="not a taodist job id"):
        journal.write_record("../escape", {"id": "../escape"})


def test_a_journal_the_scheduler_cannot_write_is_one_clear_error(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("not a folder")
    monkeypatch.setenv(journal.JOURNAL_VARIABLE, str(tmp_path / "file" / "journal"))
    for write in (lambda: journal.write_record("20260101-000001-aaaa", {"id": "20260101-000001-aaaa"}),
                  lambda: journal.append_log("20260101-000001-aaaa", 1.0, "line")):
        with pytest.raises(JobError, match="cannot write its job journal in .*TAODIST_JOURNAL.*unset"):
            write()
