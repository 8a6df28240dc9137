# lit configuration: FileCheck tests of the mega dialect, passes and the megac CLI.
import os
import lit.formats

config.name = "megac"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.megac_obj_root, "tests", "lit")
config.environment["PATH"] = os.pathsep.join(
    [config.megac_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
