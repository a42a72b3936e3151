#!/usr/bin/env python3
"""Golden vectors for the native protocol, from an independent Python encoder
of protocols/bleota.md (standard library only). Tests/BleotaProtocolsTests/
NativeMessageTests.swift checks the Swift encoder and decoder against them.
Run: python3 scripts/native-vectors.py"""
import struct
def crc16(data):
    crc=0xFFFF
    for b in data:
        crc ^= b<<8
        for _ in range(8):
            crc = ((crc<<1)^0x1021)&0xFFFF if crc&0x8000 else (crc<<1)&0xFFFF
    return crc
def msg(body): return body+struct.pack('<H',crc16(body))
def s8(t): b=t.encode(); return bytes([len(b)])+b
sha=bytes(range(32))
V={}
V['hello']=msg(bytes([0x01,1,1]))
V['helloResponse']=msg(bytes([0x81,1,1,0x0F])+struct.pack('<HHI',244,32,0x100000)+s8("1.0.0")+s8("bleota-sim"))
V['enterBootloader']=msg(bytes([0x02]))
V['start']=msg(bytes([0x03,0,0])+struct.pack('<III',600,600,0xCBF43926)+sha+struct.pack('<HH',244,8)+s8("2.0.0"))
V['startResponse']=msg(bytes([0x83,0,1])+struct.pack('<II',0,488))
V['status']=msg(bytes([0x04])+sha)
V['statusResponse']=msg(bytes([0x84,5,0]))
V['verify']=msg(bytes([0x05]))
V['verifyResponse']=msg(bytes([0x85,0])+struct.pack('<I',0xCBF43926)+sha)
V['activate']=msg(bytes([0x06]))
V['reboot']=msg(bytes([0x07]))
V['abort']=msg(bytes([0x08]))
V['getFile']=msg(bytes([0x09])+s8("log.txt")+struct.pack('<HHH',239,8,32))
V['getFileResponse']=msg(bytes([0x89,0])+struct.pack('<II',33,0x12345678)+sha)
V['activateResponse']=msg(bytes([0x86,0]))
V['data']=msg(bytes([0x10])+struct.pack('<H',2)+bytes([0xAA,0xBB,0xCC]))
V['ack']=msg(bytes([0x11])+struct.pack('<H',1)+bytes([1,0b00000001]))
V['nack']=msg(bytes([0x12])+struct.pack('<HH',1,1)+bytes([1]))
V['ackRequest']=msg(bytes([0x13]))
V['segment']=msg(bytes([0x14,0,2])+bytes([0x81,0x01,0x01]))
V['ackInterval']=msg(bytes([0x15])+struct.pack('<H',48))
V['error']=msg(bytes([0xFF,0x03,0x03])+s8("no space"))
for k,v in V.items(): print(k, v.hex())
