// The C surface of bleota's Linux Bluetooth transport: BlueZ's libbluetooth
// headers. (Its sockets are waited on through BleotaLink's DescriptorReactor,
// which brings in epoll itself through CEpoll. No _GNU_SOURCE here: it would
// give fd_set a different shape from the one other modules see, which Clang's
// modules reject on a clean build.)
#include <sys/socket.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>
#include <bluetooth/l2cap.h>
