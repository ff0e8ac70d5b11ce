#include "config.h"
#include "ntx_et.h"
