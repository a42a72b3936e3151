// The C surface of bleota's Linux Bluetooth transport: BlueZ's libbluetooth
// headers plus the socket and epoll calls the transport needs.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sys/socket.h>
#include <sys/epoll.h>
#include <bluetooth/bluetooth.h>
#include <bluetooth/hci.h>
#include <bluetooth/hci_lib.h>
#include <bluetooth/l2cap.h>
