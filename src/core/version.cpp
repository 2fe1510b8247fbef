#include "fluxrt/version.h"

namespace fluxrt {

const char* version() { return FLUXRT_VERSION_STRING; }

}  // namespace fluxrt
