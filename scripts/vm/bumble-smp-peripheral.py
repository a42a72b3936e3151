#!/usr/bin/env python3
"""An MCUmgr device made of Google's Bumble, for the VM's real-stack checks.

Bumble (PyPI `bumble`) emulates an LE air: one controller goes to the VM's kernel
through /dev/vhci (it becomes the kernel's hciN, the host's adapter), another drives a
Bumble Device on the same air, an independent peripheral stack with its own GATT
server and Security Manager. That device offers MCUmgr's SMP service
(8D53DC1D-…, characteristic DA2E7828-…) whose value and CCC descriptor demand
authenticated encryption, as Zephyr's CONFIG_MCUMGR_TRANSPORT_BT_PERM_RW_AUTHEN does,
pairs with a fixed passkey it "displays" (LE Secure Connections, bonding), and passes
each complete SMP message to `bleota sim serve --udp` (the simulated MCUboot device)
and its answers back as notifications.

With --privacy it advertises from a resolvable private address made with its IRK and
takes a new one at every reset (an SMP OS reset request), as devices do across a
reset into their bootloader; the address it advertises from is written to --address-file.
With --rotate N it also takes a new one every N seconds while it advertises, as a phone
or a privacy-minded device does. --keystore keeps its bonds in a file, so a later
process (the next day) still knows the host.

--demand says what a write needs (authentication, or only encryption); with
--ccc open the CCC descriptor has Bumble's default, open permissions, as several
vendor SDKs leave it: a client subscribes on a plain link, and each Write Command it
sends then is dropped without a word (ATT cannot answer a command). --io none makes
a device with no display (Just Works only).

    bumble-smp-peripheral.py --udp 127.0.0.1:1337 [--passkey 123456] [--privacy] [--rotate N]
        [--address-file F] [--keystore F] [--demand authentication|encryption] [--ccc protected|open]
        [--io display|none]
"""
import argparse
import asyncio
import logging
import sys

import bumble.gatt_server
from bumble.att import ATT_Error, ATT_INSUFFICIENT_AUTHENTICATION_ERROR, ATT_INSUFFICIENT_ENCRYPTION_ERROR
from bumble.controller import Controller
from bumble.core import PhysicalTransport
from bumble.device import Device, DeviceConfiguration
from bumble.gatt import (GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR, Characteristic, CharacteristicValue,
                         Descriptor, Service)
from bumble.hci import Address, HCI_LE_Set_Random_Address_Command, OwnAddressType
from bumble.host import Host
from bumble.keys import JsonKeyStore, MemoryKeyStore
from bumble.link import LocalLink
from bumble.pairing import PairingConfig, PairingDelegate
from bumble.transport import open_transport

SMP_SERVICE = "8D53DC1D-1DB7-4CD3-868B-8A527460AA84"
SMP_CHARACTERISTIC = "DA2E7828-FBCE-4E01-AE9E-261174997C48"
HOST_ADAPTER_ADDRESS = "00:AA:02:00:00:00"
IDENTITY = "C0:98:E5:00:00:01"
IRK = bytes.fromhex("3a1c5e9b0f7d24c6881e53aa07f2d64b")


def log(text):
    print(f"bumble: {text}", flush=True)


class DroppedWrites(logging.Handler):
    """Bumble's GATT server checks a Write Command's permissions and drops one that fails them,
    logging only that it ignored an exception: say which write it dropped, and why."""

    def emit(self, record):
        if record.exc_info and "ignoring exception" in record.getMessage():
            log(f"dropped a Write Command: {record.exc_info[1]}")


class ConnectionAddressLink(LocalLink):
    """Bumble's LocalLink names an LE sender by its controller's random address, but the
    kernel connects from its public one (and a rotated RPA differs from the controller's):
    name the sender by the address its connection was made with instead."""

    def send_acl_data(self, sender_controller, destination_address, transport, data):
        if transport == PhysicalTransport.LE:
            connection = sender_controller.le_connections.get(destination_address)
            destination = self.find_le_controller(destination_address)
            if connection is not None and destination is not None:
                asyncio.get_running_loop().call_soon(destination.on_link_acl_data, connection.self_address, transport, data)
                return
        super().send_acl_data(sender_controller, destination_address, transport, data)


class Display(PairingDelegate):
    """A device with a display and nothing else: it shows a fixed passkey."""

    def __init__(self, passkey):
        super().__init__(io_capability=PairingDelegate.IoCapability.DISPLAY_OUTPUT_ONLY)
        self.fixed = passkey

    async def generate_passkey(self):
        return self.fixed

    async def display_number(self, number, digits):
        log(f"shows passkey {number:0{digits}d}")


class SMPReassembler:
    """SMP over GATT: one message may arrive in several writes; its 8-byte header gives its length."""

    def __init__(self):
        self.buffer = b""

    def add(self, data):
        self.buffer += data
        messages = []
        while len(self.buffer) >= 8:
            length = 8 + int.from_bytes(self.buffer[2:4], "big")
            if len(self.buffer) < length:
                break
            messages.append(self.buffer[:length])
            self.buffer = self.buffer[length:]
        return messages


def is_reset_request(message):
    # op 2 (write), group 0 (OS), command 5 (reset)
    return message[0] & 0x07 == 2 and int.from_bytes(message[4:6], "big") == 0 and message[7] == 5


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--udp", required=True, help="HOST:PORT of bleota sim serve (SMP over UDP)")
    parser.add_argument("--passkey", type=int, default=123456)
    parser.add_argument("--privacy", action="store_true")
    parser.add_argument("--address-file")
    parser.add_argument("--rotate", type=float, default=0, help="take a new private address every N seconds while advertising")
    parser.add_argument("--keystore", help="a JSON file to keep bonds in across processes")
    parser.add_argument("--demand", choices=["authentication", "encryption"], default="authentication")
    parser.add_argument("--ccc", choices=["protected", "open"], default="protected")
    parser.add_argument("--io", choices=["display", "none"], default="display")
    arguments = parser.parse_args()
    host, port = arguments.udp.rsplit(":", 1)
    gatt_log = logging.getLogger("bumble.gatt_server")
    gatt_log.addHandler(DroppedWrites())
    gatt_log.propagate = False

    link = ConnectionAddressLink()
    vhci = await open_transport("vhci")
    Controller("host-side", host_source=vhci.source, host_sink=vhci.sink, link=link, public_address=HOST_ADAPTER_ADDRESS)
    device_controller = Controller("device-side", link=link)
    config = DeviceConfiguration()
    config.name = "bumble-smp"
    config.address = Address(IDENTITY)
    config.irk = IRK
    config.le_privacy_enabled = arguments.privacy
    config.le_rpa_timeout = 0
    config.advertising_interval_min = 20
    config.advertising_interval_max = 40
    config.advertising_data = bytes([2, 0x01, 0x06, 17, 0x07]) + bytes.fromhex(SMP_SERVICE.replace("-", ""))[::-1]
    device = Device(config=config, host=Host(device_controller, device_controller))
    device.keystore = JsonKeyStore(IDENTITY, arguments.keystore) if arguments.keystore else MemoryKeyStore()
    if arguments.io == "display":
        delegate = Display(arguments.passkey)
    else:
        delegate = PairingDelegate(io_capability=PairingDelegate.IoCapability.NO_OUTPUT_NO_INPUT)
    device.pairing_config_factory = lambda connection: PairingConfig(
        sc=True, mitm=arguments.io == "display", bonding=True, delegate=delegate,
        identity_address_type=PairingConfig.AddressType.RANDOM)

    authenticated = set()  # connection handles whose key came from an authenticated pairing
    reassemblers = {}
    loop = asyncio.get_running_loop()

    class Forwarder(asyncio.DatagramProtocol):
        def datagram_received(self, data, address):
            loop.create_task(answer(data))

    transport, _ = await loop.create_datagram_endpoint(Forwarder, remote_addr=(host, int(port)))
    resetting = {"pending": False}

    async def answer(message):
        for connection in list(device.connections.values()):
            size = connection.att_mtu - 3
            for offset in range(0, len(message), size):
                await device.notify_subscriber(connection, characteristic, message[offset:offset + size])
        if resetting["pending"]:
            resetting["pending"] = False
            loop.create_task(reset())

    async def reset():
        # The device answers, then resets: the link drops and (with privacy) it comes back at a new address.
        await asyncio.sleep(0.2)
        for connection in list(device.connections.values()):
            try:
                await connection.disconnect()
            except Exception:
                pass
        await advertise(rotate=arguments.privacy)

    def on_write(connection, value):
        # Bumble counts any encrypted link as authenticated; this device wants the key to be.
        if arguments.demand == "authentication" and connection.handle not in authenticated:
            log(f"refused a write of {len(value)} bytes: the link is not authenticated")
            raise ATT_Error(ATT_INSUFFICIENT_AUTHENTICATION_ERROR)
        if arguments.demand == "encryption" and not connection.is_encrypted:
            log(f"refused a write of {len(value)} bytes: the link is not encrypted")
            raise ATT_Error(ATT_INSUFFICIENT_ENCRYPTION_ERROR)
        log(f"write of {len(value)} bytes")
        reassembler = reassemblers.setdefault(connection.handle, SMPReassembler())
        for message in reassembler.add(bytes(value)):
            if is_reset_request(message):
                resetting["pending"] = True
            transport.sendto(message)

    demanded = ((Characteristic.Permissions.READ_REQUIRES_AUTHENTICATION | Characteristic.Permissions.WRITE_REQUIRES_AUTHENTICATION)
                if arguments.demand == "authentication" else
                (Characteristic.Permissions.READ_REQUIRES_ENCRYPTION | Characteristic.Permissions.WRITE_REQUIRES_ENCRYPTION))
    permissions = Characteristic.Permissions.READABLE | Characteristic.Permissions.WRITEABLE | demanded
    characteristic = Characteristic(SMP_CHARACTERISTIC,
                                    Characteristic.Properties.WRITE_WITHOUT_RESPONSE | Characteristic.Properties.NOTIFY,
                                    permissions, CharacteristicValue(write=on_write))
    # The CCC descriptor demands it too, as Zephyr's does: a client learns it must pair when it subscribes.
    # Left out, Bumble adds its own, open to any link.
    if arguments.ccc == "protected":
        characteristic.descriptors = [Descriptor(GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR, permissions,
                                                 device.gatt_server.make_descriptor_value(characteristic))]
    device.add_service(Service(SMP_SERVICE, [characteristic]))
    characteristic.on("subscription", lambda connection, notify, indicate: log(f"subscription: notify {notify}, indicate {indicate}"))

    @device.on("connection")
    def on_connection(connection):
        log(f"connection from {connection.peer_address}")

        def on_pairing(keys):
            if keys.ltk is not None and keys.ltk.authenticated:
                authenticated.add(connection.handle)
            log(f"paired: authenticated {keys.ltk.authenticated if keys.ltk else None}")

        def on_encryption_change():
            if connection.is_encrypted:
                loop.create_task(check_bond(connection))

        connection.on("pairing", on_pairing)
        connection.on("pairing_failure", lambda reason: log(f"pairing failed: {reason}"))
        connection.on("connection_encryption_change", on_encryption_change)
        connection.on("disconnection", lambda reason: (authenticated.discard(connection.handle), reassemblers.pop(connection.handle, None)))

    async def check_bond(connection):
        # A bonded host encrypts with the stored key: authenticated if that key was.
        keys = await device.keystore.get(str(connection.peer_address))
        if keys is not None and keys.ltk is not None and keys.ltk.authenticated:
            authenticated.add(connection.handle)
        log(f"encrypted with {'an authenticated' if connection.handle in authenticated else 'no authenticated'} key ({connection.peer_address})")

    async def rotate_while_advertising():
        # A new private address every few seconds, while nobody is connected (a connection ends advertising).
        while True:
            await asyncio.sleep(arguments.rotate)
            if not device.connections:
                await advertise(rotate=True)

    async def advertise(rotate):
        await device.stop_advertising()
        if rotate:
            address = Address.generate_private_address(device.irk)
            await device.send_sync_command(HCI_LE_Set_Random_Address_Command(random_address=address))
            device.random_address = address
        await device.start_advertising(own_address_type=OwnAddressType.RANDOM, auto_restart=True)
        text = str(device.random_address).split("/")[0]
        log(f"advertising as {text} (identity {IDENTITY})")
        if arguments.address_file:
            with open(arguments.address_file, "w") as out:
                out.write(text + "\n")

    await device.power_on()
    await advertise(rotate=False)
    if arguments.rotate > 0 and arguments.privacy:
        loop.create_task(rotate_while_advertising())
    await loop.create_future()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
