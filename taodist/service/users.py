"""Who submits a job, and where a shared cluster lets jobs write: the users of one scheduler kept apart.

A job record names its **owner**, an identity string decided the way a Dask
deployment can decide it:

* ``tls:<subject>`` -- the client connected over mutual TLS and the
  scheduler sees its certificate: the certificate's subject
  (``tls:CN=alice,O=lab``), which the cluster's CA vouched for. Give each
  user a certificate of their own: the holders of one certificate are one
  user.
* ``token:<sha256>`` -- otherwise: the SHA-256 of the user's token, a random
  secret generated once and kept in ``$XDG_CONFIG_HOME/taodist/token``
  (``~/.config/taodist/token``, mode 0600), or given by the environment
  variable ``TAODIST_TOKEN``. Only the hash reaches the scheduler.

Only the owner's client may cancel a job, read its log or fetch its model
(:mod:`taodist.service.cluster`). The check runs in taodist's client: Dask has
no access control of its own, and whoever can connect to a scheduler can run
code on it. Ownership keeps honest users of one scheduler from acting on each
other's jobs by mistake; mutual TLS decides who may connect at all.

The scheduler's environment variable ``TAODIST_RESULTS_ROOT`` (an absolute
path) confines the outputs of submitted jobs: an output must resolve, links
followed, to a path inside that folder (:func:`check_results_root`).
"""

import hashlib
import os
import secrets
import stat
from pathlib import Path

from ..io.atomic import atomic_write
from .jobs import JobError

#: the environment variable holding a user's token (it takes precedence over the token file)
TOKEN_VARIABLE = "TAODIST_TOKEN"
#: the scheduler's environment variable naming the folder that submitted jobs' outputs must stay inside
RESULTS_ROOT_VARIABLE = "TAODIST_RESULTS_ROOT"
#: a token shorter than this is refused: its hash, which any client can read, would be guessable
MIN_TOKEN_LENGTH = 16


def token_file():
    """Where this user's token is kept: ``$XDG_CONFIG_HOME/taodist/token``, else ``~/.config/taodist/token``.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    JobError
        If neither ``XDG_CONFIG_HOME`` nor a home folder is known.
    """
    config = os.environ.get("XDG_CONFIG_HOME")
    if not config:
        try:
            config = Path.home() / ".config"
        except RuntimeError:  # no HOME and no passwd entry (a bare container user)
            raise JobError(f"No home folder to keep a taodist token in; set {TOKEN_VARIABLE} (a long random "
                           "string, the same on every machine you submit from) or XDG_CONFIG_HOME.") from None
    return Path(config) / "taodist" / "token"


def _checked(token, where):
    token = token.strip()
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() for c in token):
        raise JobError(f"The taodist token in {where} must be one word of at least {MIN_TOKEN_LENGTH} characters "
                       "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'); fix or remove it.")
    return token


def user_token(create=True):
    """This user's token: ``TAODIST_TOKEN`` if set, else the token file, generated on first use.

    Parameters
    ----------
    create : bool, default=True
        Generate the token file (mode 0600) when there is none.

    Returns
    -------
    str or None
        None only when ``create`` is false and there is no token yet.

    Raises
    ------
    JobError
        For a token file other users may read or write (like ``ssh``, taodist
        will not use a secret that is not private), a token too short to be
        secret, or a token file that cannot be read or created.
    """
    if os.environ.get(TOKEN_VARIABLE):
        return _checked(os.environ[TOKEN_VARIABLE], f"the environment variable {TOKEN_VARIABLE}")
    path = token_file()
    for _ in range(2):  # a second pass reads the file another process created at the same moment
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # non-blocking: a FIFO put there must not hang
        except FileNotFoundError:
            if not create:
                return None
            try:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                token = secrets.token_urlsafe(32)
                atomic_write(path, (token + "\n").encode(), mode=0o600, replace=False)
                return token
            except FileExistsError:
                continue
            except OSError as exc:
                raise JobError(f"Cannot create the taodist token file {path}: {exc.strerror or exc}; set "
                               f"{TOKEN_VARIABLE} instead (a long random string).") from exc
        except OSError as exc:
            raise JobError(f"The taodist token file {path} cannot be read ({exc.strerror or exc}); make it a "
                           f"private regular file, or set {TOKEN_VARIABLE} instead.") from exc
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise JobError(f"The taodist token file {path} is not a regular file; remove it (a new token is "
                               f"generated) or set {TOKEN_VARIABLE}.")
            if info.st_mode & 0o077:
                raise JobError(f"The taodist token file {path} is readable or writable by other users (mode "
                               f"{stat.S_IMODE(info.st_mode):04o}); run `chmod 600 {path}`.")
            data = fh.read(4096)
        try:
            return _checked(data.decode("ascii"), str(path))
        except UnicodeDecodeError:
            raise JobError(f"The taodist token file {path} is not a token (not ASCII text); remove it to have a "
                           f"new one generated, or set {TOKEN_VARIABLE}.") from None
    raise JobError(f"The taodist token file {path} appeared and vanished while being read; run the command again.")


def token_owner(token):
    """The owner recorded for jobs submitted with ``token``: ``"token:"`` and the token's SHA-256.

    Parameters
    ----------
    token : str

    Returns
    -------
    str
    """
    return "token:" + hashlib.sha256(token.encode()).hexdigest()


#: short names of the attributes of a certificate subject, as in RFC 4514
_RDN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
              "localityName": "L", "stateOrProvinceName": "ST", "domainComponent": "DC", "userId": "UID",
              "emailAddress": "emailAddress"}


def certificate_owner(peercert):
    """The owner of a client that presented a certificate: ``"tls:"`` and its subject, or None.

    Parameters
    ----------
    peercert : dict or None
        What Python's ``ssl`` module reports of a verified peer certificate
        (``SSLSocket.getpeercert()``); Dask keeps it in a TLS comm's
        ``extra_info["peercert"]``.

    Returns
    -------
    str or None
        None when there is no certificate or it has no subject.
    """
    if not peercert or not peercert.get("subject"):
        return None
    parts = []
    for rdn in peercert["subject"]:
        parts.append("+".join(f"{_RDN_NAMES.get(k, k)}={v}" for k, v in rdn))
    return "tls:" + ",".join(parts)


def owner_label(owner):
    """How an owner reads in ``status --all`` and in messages: ``CN=alice``, ``token 1a2b3c4d``, ``(no owner)``.

    Parameters
    ----------
    owner : str or None
        A record's ``owner``.

    Returns
    -------
    str
    """
    if not owner:
        return "(no owner)"
    kind, _, value = owner.partition(":")
    if kind == "token":
        return f"token {value[:8]}"
    return value if kind == "tls" else owner


def results_root_of(value):
    """The results root a ``TAODIST_RESULTS_ROOT`` value names, or None when unset.

    Parameters
    ----------
    value : str or None
        The variable's value, as read on the scheduler.

    Returns
    -------
    str or None
        The absolute path (not yet resolved: links are followed where a
        path is checked).

    Raises
    ------
    JobError
        If the value is not an absolute path.
    """
    if value is None or not value.strip():
        return None
    if not os.path.isabs(value) or "\x00" in value:
        raise JobError(f"{RESULTS_ROOT_VARIABLE}={value!r} on the scheduler is not an absolute path; the cluster's "
                       "administrator must set it to a folder such as /store/models.")
    return value


def check_results_root(job, root):
    """Refuse a job whose output does not resolve to a path inside ``root``.

    Both paths are resolved with links followed (``os.path.realpath``), so
    neither ``..`` nor a link inside the root that points out of it reaches
    another folder. Only the output is confined; the job's inputs are read
    from wherever they are.

    Parameters
    ----------
    job : taodist.service.Job
    root : str or None
        The results root (:func:`results_root_of`); None allows any output.

    Raises
    ------
    JobError
        Naming the output, where it resolves to, and the root.
    """
    if root is None:
        return
    real_root = os.path.realpath(root)
    out = os.path.realpath(job.output)
    if not out.startswith(real_root.rstrip(os.sep) + os.sep):
        where = "" if out == os.path.abspath(job.output) else f" (it resolves to {out})"
        raise JobError(f"output: {job.output}{where} is outside the results root {root} that this scheduler's "
                       f"{RESULTS_ROOT_VARIABLE} sets; write the model under {root}/.")
