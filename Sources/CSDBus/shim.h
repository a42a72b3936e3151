// sd-bus, systemd's D-Bus library (libsystemd-dev): bleota talks to bluetoothd's
// D-Bus API through it (an org.bluez.Agent1 that answers pairing). Only the
// non-variadic calls are usable from Swift; the vtable macros are not, so the
// agent is exported with sd_bus_add_object and a plain message callback.
#include <systemd/sd-bus.h>
#include <time.h>
