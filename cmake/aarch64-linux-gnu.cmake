# Cross build for aarch64 Linux with Debian's g++-aarch64-linux-gnu and the :arm64 multiarch -dev
# packages (scripts/setup.sh installs them); tests run under qemu-user (scripts/test_aarch64.sh).
# The binaries load the arm64 multiarch runtime (libc6:arm64, libstdc++6:arm64, libhwy1:arm64)
# from the host's /lib/aarch64-linux-gnu, so qemu needs no -L prefix; pointing it at the cross
# toolchain's /usr/aarch64-linux-gnu instead mixes two copies of glibc and hangs in pthread_create.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
# pkg-config must see the arm64 .pc files only (libhwy).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
