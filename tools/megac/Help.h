// The --help texts of megac and its subcommands (Help.cpp).
#pragma once

namespace megac::cli {

extern const char *const kMainHelp;
extern const char *const kImportHelp;
extern const char *const kDescribeHelp;
extern const char *const kCompileHelp;
extern const char *const kRunHelp;
extern const char *const kTrainHelp;
extern const char *const kDataHelp;
extern const char *const kGenerateHelp;
extern const char *const kExportHelp;
extern const char *const kPlanHelp;
extern const char *const kCalibrateHelp;

} // namespace megac::cli
