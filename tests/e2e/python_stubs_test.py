#!/usr/bin/env python3
"""The megac package's type stubs agree with the module (issue 36): every public name of the
package (python/megac/__init__.py) and of its extension (megac._megac, python/Module.cpp) has a
stub in __init__.pyi / _megac.pyi and every stub names something the module has, class by class
down to methods, properties and instance attributes (read off real instances: a Plan, its
Layouts, a TrainSession), and each Python function's parameters are the stub's, in order.

It cannot pass vacuously: it checks that the comparison finds what it must (plan, Model.from_hf,
TrainSession.load, ...), and that a stub with one method removed and one invented is caught.

usage: python_stubs_test.py --pythonpath build/python --workdir DIR
Exits 77 (a ctest skip) when the module was not built (no pybind11: MEGAC_PYTHON=OFF).
"""
import argparse
import ast
import inspect
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "..", "examples", "tiny-corpus.npy")
GPT = "gpt:layers=1,hidden=32,heads=2,seq=64,vocab=256"
from e2e_support import SKIP, check, import_megac_package  # noqa: E402


def public(name):
    return not name.startswith("_")


def stub_names(text):
    """{top-level public name: None for a non-class, else {member: parameter names or None}}."""
    tree = ast.parse(text)
    out = {}

    def params(fn):
        a = fn.args
        names = [x.arg for x in a.posonlyargs + a.args]
        if a.vararg:
            names.append("*" + a.vararg.arg)
        names += [x.arg for x in a.kwonlyargs]
        if a.kwarg:
            names.append("**" + a.kwarg.arg)
        return names

    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = {}
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    members[item.name] = params(item)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members[item.target.id] = None
            out[node.name] = {k: v for k, v in members.items() if public(k)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = params(node)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:  # re-exports are written `import X as X`
                if alias.asname and alias.asname == alias.name:
                    out[alias.name] = "import"
    return {k: v for k, v in out.items() if public(k)}


def signature_names(fn):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a pybind11 builtin: no Python signature to compare
        return None
    names = []
    for p in sig.parameters.values():
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        names.append(prefix + p.name)
    return names


def module_names(module, instances):
    """The module's public names, as stub_names gives them: classes with their public members
    (from the class and the given instances' attributes), functions with their parameters."""
    out = {}
    for name, value in vars(module).items():
        if not public(name) or inspect.ismodule(value):
            continue
        if inspect.isclass(value):
            members = {}
            for klass in value.__mro__:
                if klass is object or klass.__module__ == "builtins" or \
                        klass.__name__ == "pybind11_object":
                    continue
                for m, v in vars(klass).items():
                    if public(m) and m not in members:
                        f = v.__func__ if isinstance(v, (classmethod, staticmethod)) else v
                        members[m] = signature_names(f) if inspect.isfunction(f) else None
            for instance in instances.get(name, []):
                for m in vars(instance) if hasattr(instance, "__dict__") else []:
                    if public(m) and m not in members:
                        members[m] = None
            out[name] = members
        elif callable(value):
            out[name] = signature_names(value)
    return out


def differences(stubs, real, what):
    """What differs between the stubs and the module, one line each (empty: they agree)."""
    diff = []
    for name in sorted(set(stubs) | set(real)):
        if name not in stubs:
            diff.append(f"{what}.{name} has no stub")
        elif name not in real:
            diff.append(f"the stub {what}.{name} names nothing in the module")
        elif isinstance(real[name], dict) or isinstance(stubs[name], dict):
            if stubs[name] == "import":  # a re-exported class: checked in its own module
                continue
            if not isinstance(real[name], dict) or not isinstance(stubs[name], dict):
                diff.append(f"{what}.{name}: a class on one side only")
                continue
            for m in sorted(set(stubs[name]) | set(real[name])):
                if m not in stubs[name]:
                    diff.append(f"{what}.{name}.{m} has no stub")
                elif m not in real[name]:
                    diff.append(f"the stub {what}.{name}.{m} names nothing in the module")
                elif real[name][m] is not None and stubs[name][m] is not None and \
                        real[name][m] != stubs[name][m]:
                    diff.append(f"{what}.{name}.{m}: parameters {real[name][m]} in the module, "
                                f"{stubs[name][m]} in the stub")
        elif real[name] is not None and stubs[name] not in (None, "import") and \
                real[name] != stubs[name]:
            diff.append(f"{what}.{name}: parameters {real[name]} in the module, {stubs[name]} "
                        "in the stub")
    return diff


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pythonpath", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    megac = import_megac_package(args.pythonpath)
    if megac is None:
        return SKIP
    from megac import _megac
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    package = os.path.dirname(megac.__file__)

    # Real instances, so attributes set in __init__ count.
    model = megac.Model.from_spec(GPT)
    plan = megac.plan(model, cluster="cpu:1x2", global_batch=8, precision="fp32")
    session = megac.TrainSession(model, data=DATA, steps=1, global_batch=8, micro_batch=4,
                                 lr=1e-3, threads=1)
    instances = {"Model": [model], "Plan": [plan], "Layout": list(plan.layouts),
                 "TrainSession": [session]}
    check(len(plan.layouts) > 0, f"a plan to read attributes off: {len(plan.layouts)} layouts")

    layer_text = open(os.path.join(package, "__init__.pyi")).read()
    layer_stubs = stub_names(layer_text)
    layer = module_names(megac, instances)
    check(set(megac.__all__) <= set(layer), f"__all__ names the module's: {megac.__all__}")
    # What the comparison must see, or it compares nothing.
    for name, member in [("plan", None), ("Plan", "explain"), ("Plan", "timeline"),
                         ("Layout", "step_time_s"), ("Layout", "run_config"),
                         ("Model", "from_hf"), ("Model", "from_torch"), ("TrainSession", "load"),
                         ("TrainSession", "model"), ("MegacError", None)]:
        found = name in layer and (member is None or member in layer[name])
        check(found, f"the module's public layer has {name}{'.' + member if member else ''}")
    diff = differences(layer_stubs, layer, "megac")
    check(not diff, "__init__.pyi and megac agree name for name and parameter for parameter" +
          "".join("\n  " + d for d in diff))

    ext_stubs = stub_names(open(os.path.join(package, "_megac.pyi")).read())
    ext = module_names(_megac, {})
    for name, member in [("PlanSearch", "report"), ("Session", "load"), ("Session", "resumed"),
                         ("Model", "from_onnx")]:
        check(name in ext and member in ext[name], f"megac._megac has {name}.{member}")
    diff = differences(ext_stubs, ext, "megac._megac")
    check(not diff, "_megac.pyi and megac._megac agree name for name" +
          "".join("\n  " + d for d in diff))

    # The comparison catches a stub that lost a method and one that names nothing.
    broken = layer_text.replace("    def from_hf(", "    def from_hugging_face(")
    check(broken != layer_text, "the stub text has Model.from_hf to break")
    diff = differences(stub_names(broken), layer, "megac")
    check("megac.Model.from_hf has no stub" in diff and
          "the stub megac.Model.from_hugging_face names nothing in the module" in diff,
          f"a renamed stub method is caught: {diff}")
    broken = layer_text.replace("def timeline(self, path: _Path)", "def timeline(self, file: _Path)")
    diff = differences(stub_names(broken), layer, "megac")
    check(any("Plan.timeline: parameters" in d for d in diff),
          f"a renamed parameter is caught: {diff}")
    session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
