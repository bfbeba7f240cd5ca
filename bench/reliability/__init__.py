"""Reliability: crashes, full disks, bad input and overload against real processes."""
