"""pytest plugin for the GPU check: each failure or error is written to $OUT/failures.log the
moment it is reported, so a suite stopped at its time limit still leaves its tracebacks."""
import os


def pytest_runtest_logreport(report):
    if report.failed and not os.environ.get("PYTEST_XDIST_WORKER"):  # once, by the controller
        path = os.path.join(os.environ.get("OUT", "/tmp"), "failures.log")
        with open(path, "a") as f:
            f.write(f"=== {report.nodeid} [{report.when}]\n{report.longreprtext[-4000:]}\n")
