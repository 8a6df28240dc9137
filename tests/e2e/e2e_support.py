"""What the end-to-end test scripts share: ctest's skip code, the pass/fail line, re-running under
the test venv when a module lives only there, and importing the built megac Python package.

Each script imports it by name (a script's own folder is first on sys.path).
"""
import os
import sys

SKIP = 77  # ctest's SKIP_RETURN_CODE for every e2e test


def check(condition, message):
    """Prints `ok: message`, or `FAIL: message` and exits 1."""
    if not condition:
        print("FAIL:", message)
        sys.exit(1)
    print("ok:", message)


def ensure_modules(venv, modules, missing_hint="run scripts/bootstrap.sh"):
    """Returns when every module in `modules` imports; otherwise re-executes this script under
    the venv's python (once: not when already running there), or exits SKIP saying what lacks."""
    try:
        for name in modules:
            __import__(name)
        return
    except ImportError:
        pass
    python = os.path.join(venv, "bin", "python") if venv else ""
    # A venv's python is a link to the base interpreter: compare prefixes, not executables.
    if python and os.path.exists(python) and \
            os.path.realpath(sys.prefix) != os.path.realpath(venv):
        os.execv(python, [python] + sys.argv)
    print(f"SKIP: {', '.join(modules)} not importable and {python or 'no venv'} is missing or "
          f"lacks it; {missing_hint}")
    sys.exit(SKIP)


def import_megac_package(pythonpath):
    """The megac Python package built in `pythonpath`, or None after printing why it is not
    there (the caller returns SKIP)."""
    sys.path.insert(0, os.path.abspath(pythonpath))
    try:
        import megac
        return megac
    except ImportError as e:
        print(f"SKIP: the megac Python package is not built in {pythonpath} ({e}); it needs "
              "pybind11 (Debian pybind11-dev) when CMake runs (MEGAC_PYTHON)")
        return None
