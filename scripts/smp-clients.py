#!/usr/bin/env python3
"""One command line over two MCUmgr clients from PyPI that were written
independently of smpmgr/smpclient, so scripts/smp-interop can drive
bleota's simulated device with them:

  toolkit  mcumgr-toolkit 0.20.0 (Rust with Python bindings): SMP v2, UDP or serial
  v1       mcumgr-client-wrapper 0.3.0 (bindings of mcumgr-client): SMP v1, serial only

Neither ships a command line on PyPI. Exit status: 0 done (the answer on
stdout, as JSON), 1 the command failed (one line on stderr), 3 the client
cannot do that command.

  smp-clients.py toolkit --udp 127.0.0.1:21337 state
  smp-clients.py toolkit --serial /tmp/pty upload app.bin --image 1
  smp-clients.py toolkit --udp 127.0.0.1:21337 update app.bin   (its firmware_update)
  smp-clients.py v1 --serial /tmp/pty test 0123…(64 hex digits)
"""
import argparse
import json
import sys


class Unsupported(Exception):
    pass


def slots_toolkit(states):
    return [{"image": s.image, "slot": s.slot, "version": s.version, "hash": s.hash.hex() if s.hash else "",
             "pending": s.pending, "confirmed": s.confirmed, "active": s.active, "permanent": s.permanent}
            for s in states]


def toolkit(args):
    from mcumgr_toolkit import MCUmgrClient
    if args.udp:
        host, port = args.udp.rsplit(":", 1)
        client = MCUmgrClient.udp(host, int(port), timeout_ms=args.timeout_ms)
    else:
        client = MCUmgrClient.serial(args.serial, args.baud, args.timeout_ms)
    with client as c:
        command, rest = args.command, args.rest
        if command == "state":
            return slots_toolkit(c.image_get_state())
        if command == "echo":
            return c.os_echo(rest[0])
        if command == "params":
            p = c.os_mcumgr_parameters()
            return {"buf_size": p.buf_size, "buf_count": p.buf_count}
        if command == "upload":
            c.image_upload(open(rest[0], "rb").read(), image=args.image)
            return "uploaded"
        if command == "upload-upgrade":
            # The upload's `upgrade` flag: the device is to refuse an image not newer than the one it runs.
            c.image_upload(open(rest[0], "rb").read(), image=args.image, upgrade_only=True)
            return "uploaded"
        if command == "test":
            return slots_toolkit(c.image_set_state(hash=bytes.fromhex(rest[0]), confirm=False))
        if command == "confirm":
            return slots_toolkit(c.image_set_state(hash=bytes.fromhex(rest[0]) if rest else None, confirm=True))
        if command == "update":
            # The toolkit's own firmware update: upload, mark for a test boot, reset.
            c.firmware_update(open(rest[0], "rb").read())
            return "updated"
        if command == "reset":
            c.os_system_reset()
            return "reset"
        if command == "reset-loader":
            # boot_mode 1: the firmware loader (Zephyr's CONFIG_MCUMGR_GRP_OS_RESET_BOOT_MODE)
            c.os_system_reset(boot_mode=1)
            return "reset"
        if command == "bootloader-info":
            return c.os_bootloader_info()
        if command == "slot-info":
            return [{"image": i.image, "max_image_size": i.max_image_size,
                     "slots": [{"slot": s.slot, "size": s.size, "upload_image_id": s.upload_image_id} for s in i.slots]}
                    for i in c.image_slot_info()]
        if command == "fs-upload":
            c.fs_file_upload(rest[1], open(rest[0], "rb").read())
            return "stored"
        if command == "fs-download":
            data = c.fs_file_download(rest[0])
            open(rest[1], "wb").write(data)
            return len(data)
        raise Unsupported(command)


def v1(args):
    import mcumgr_client
    if args.udp:
        raise Unsupported("mcumgr-client-wrapper speaks serial only")
    session = mcumgr_client.SerialSession(args.serial, args.baud, initial_timeout_s=max(1, args.timeout_ms // 1000))
    command, rest = args.command, args.rest
    if command == "state":
        return [dict(entry, hash=bytes(entry["hash"]).hex()) for entry in session.list()]
    if command == "upload":
        # The library picks image 1 by itself when the file's NAME contains "slot1": name files accordingly.
        session.upload(rest[0], args.image or 0)
        return "uploaded"
    if command == "test":
        session.test(bytes.fromhex(rest[0]))
        return "marked"
    if command == "confirm":
        if not rest:
            raise Unsupported("confirm needs a hash with mcumgr-client-wrapper")
        session.test(bytes.fromhex(rest[0]), confirm=True)
        return "confirmed"
    if command == "reset":
        session.reset()
        return "reset"
    raise Unsupported(command)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("client", choices=["toolkit", "v1"])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--udp", metavar="HOST:PORT")
    where.add_argument("--serial", metavar="PATH")
    parser.add_argument("--baud", type=int, default=115200)
    parser.add_argument("--timeout-ms", type=int, default=3000)
    parser.add_argument("--image", type=int, default=None)
    parser.add_argument("command", choices=["state", "echo", "params", "upload", "upload-upgrade", "update", "test", "confirm", "reset", "fs-upload", "fs-download", "slot-info", "reset-loader", "bootloader-info"])
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args()
    try:
        answer = (toolkit if args.client == "toolkit" else v1)(args)
    except Unsupported as reason:
        print(f"unsupported: {reason}", file=sys.stderr)
        return 3
    except BaseException as failure:  # the bindings raise RuntimeError, or PanicException (a BaseException)
        if isinstance(failure, (KeyboardInterrupt, SystemExit)):
            raise
        print(f"error: {type(failure).__name__}: {' '.join(str(failure).split())[:300]}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
