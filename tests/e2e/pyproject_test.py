#!/usr/bin/env python3
"""pyproject.toml (`pip install .`, scikit-build-core) names what the repository has (issue 36):
the build backend and its requirements, a readme that exists, the package folder it puts in the
wheel (python/megac, with __init__.py, the stubs and py.typed), a CMake target to build that
python/CMakeLists.txt defines, an install component that installs that target into the package
folder, CMake options the top-level CMakeLists.txt declares, the same minimum CMake version, and
dependencies that cover every third-party module the package imports at load time. A full `pip
install .` builds most of megac (minutes to an hour on two cores), so CI checks the metadata and
the paths; docs/python.md reports a manual run.

usage: pyproject_test.py --root REPO
"""
import argparse
import ast
import os
import re
import sys

from e2e_support import check  # noqa: E402

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None


def cmake_calls(text, command):
    """The argument lists of every `command(...)` call in a CMake file (comments dropped)."""
    text = re.sub(r"#[^\n]*", "", text)
    return [m.group(1).split() for m in re.finditer(command + r"\s*\(([^)]*)\)", text)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    root = parser.parse_args().root
    if tomllib is None:
        print("SKIP: reading pyproject.toml needs Python 3.11's tomllib")
        return 77
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        meta = tomllib.load(f)

    system = meta["build-system"]
    check(system["build-backend"] == "scikit_build_core.build", "the backend is scikit-build-core")
    requires = {re.split(r"[<>=!~ ]", r)[0].lower() for r in system["requires"]}
    check({"scikit-build-core", "pybind11"} <= requires,
          f"the build requires scikit-build-core and pybind11: {system['requires']}")

    project = meta["project"]
    check(project["name"] == "megac", "the distribution is megac")
    check(os.path.isfile(os.path.join(root, project["readme"])),
          f"the readme {project['readme']} exists")
    skb = meta["tool"]["scikit-build"]

    # The wheel's package folder: the pure-Python layer, its stubs, py.typed.
    packages = skb["wheel"]["packages"]
    check(len(packages) == 1, f"one package folder: {packages}")
    folder = os.path.join(root, packages[0])
    name = os.path.basename(packages[0])
    check(name == project["name"], f"the folder {packages[0]} is the import name {name}")
    for file in ("__init__.py", "__init__.pyi", "_megac.pyi", "py.typed"):
        check(os.path.isfile(os.path.join(folder, file)), f"{packages[0]}/{file} exists")

    # The target built and its install rule.
    python_cmake = open(os.path.join(root, "python", "CMakeLists.txt")).read()
    targets = {args[0] for args in cmake_calls(python_cmake, "pybind11_add_module")}
    check(skb["build"]["targets"] == ["_megac"] and "_megac" in targets,
          f"build.targets {skb['build']['targets']} is python/CMakeLists.txt's module {targets}")
    installs = [args for args in cmake_calls(python_cmake, "install") if args[0] == "TARGETS"]
    components = skb["install"]["components"]
    rules = [a for a in installs if "_megac" in a and "COMPONENT" in a and
             a[a.index("COMPONENT") + 1] in components]
    check(len(rules) == 1 and rules[0][rules[0].index("DESTINATION") + 1] == name,
          f"component {components} installs _megac into {name}/: {installs}")
    check("_megac" in open(os.path.join(folder, "__init__.py")).read(),
          "the package imports the extension it installs beside it")

    # CMake options and version agree with the top-level CMakeLists.txt.
    top = open(os.path.join(root, "CMakeLists.txt")).read()
    options = {args[0] for args in cmake_calls(top, "option")}
    for key in skb["cmake"].get("define", {}):
        check(key in options, f"cmake.define {key} is an option of CMakeLists.txt")
    required = cmake_calls(top, "cmake_minimum_required")[0][1]
    check(skb["cmake"]["version"] == ">=" + required,
          f"cmake.version {skb['cmake']['version']} is CMakeLists.txt's minimum {required}")

    # Every third-party module the package imports when loaded is a dependency.
    deps = {re.split(r"[<>=!~ \[]", d)[0].lower() for d in project["dependencies"]}
    imported = set()
    for node in ast.walk(ast.parse(open(os.path.join(folder, "__init__.py")).read())):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            imported.add(node.module.split(".")[0])
    # torch is imported inside from_torch only: the optional dependency.
    top_level = set()
    for node in ast.parse(open(os.path.join(folder, "__init__.py")).read()).body:
        if isinstance(node, ast.Import):
            top_level |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            top_level.add(node.module.split(".")[0])
    third_party = {m for m in top_level if m not in sys.stdlib_module_names}
    check(third_party <= deps, f"load-time imports {sorted(third_party)} are dependencies "
          f"{sorted(deps)}")
    check("torch" in imported and "torch" in
          {re.split(r"[<>=!~ \[]", d)[0] for d in project["optional-dependencies"]["torch"]},
          "torch (imported by from_torch only) is the optional extra [torch]")
    stub = open(os.path.join(folder, "__init__.pyi")).read()
    check("numpy" in stub and "numpy" in deps, "the stubs' numpy is a dependency")
    return 0


if __name__ == "__main__":
    sys.exit(main())
