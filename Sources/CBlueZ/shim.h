// The C surface of bleota's Linux Bluetooth transport: BlueZ's libbluetooth
// headers plus the epoll calls the transport's reactor needs. (No
// _GNU_SOURCE here: it would give fd_set a different shape from the one other
// modules see, which Clang's modules reject on a clean build.)
#include <sys/socket.h>
#include <sys/epoll.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>
#include <bluetooth/l2cap.h>
