import BleotaLink
