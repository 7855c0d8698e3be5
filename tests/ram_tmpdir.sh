#!/bin/sh
# Prints a temp dir in RAM (/dev/shm) for the test suite's clusters when the machine has room
# for it (8 GiB free there and 10 GiB of memory available), else nothing (the Makefile then
# keeps the system's temp dir). See the Makefile's `test` target for why.
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || exit 0
free_kib=$(df -Pk "$shm" 2>/dev/null | awk 'NR==2 {print $4}')
avail_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo 2>/dev/null)
[ "${free_kib:-0}" -ge 8388608 ] && [ "${avail_kib:-0}" -ge 10485760 ] || exit 0
echo "$shm/swiftlite-tests-$(id -u)"
