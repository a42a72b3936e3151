// Nothing to compile: the module only declares libFuzzer's driver (include/CLibFuzzer.h).
#include "CLibFuzzer.h"
