// epoll(7), which Swift's Glibc module does not bring in, for BleotaLink's
// DescriptorReactor: the one event loop every socket, serial port and
// pseudo-terminal in bleota is waited on through. (No _GNU_SOURCE here: it
// would give fd_set a different shape from the one other modules see, which
// Clang's modules reject on a clean build.)
#include <sys/epoll.h>
