#!/usr/bin/env bash
# Gradescope autograder set-up (runs once, as root, when Gradescope builds the image). The zip,
# made by tools/gradescope/make-zip LAB, holds the kit (solutions included: students never see
# this image), this script, run_autograder and autograder_lab; Gradescope unpacks it to
# /autograder/source. Guide: docs/instructor-guide.md, "Gradescope".
# The kit needs Debian 12's packages (LibTorch 1.13 with Gloo, OpenBLAS): tools/setup-debian.sh
# installs them and stops with a message on another distribution.
set -euo pipefail
KIT=${DDPLAB_KIT:-/autograder/source}
cd "$KIT"
# Gradescope's base images are Ubuntu (22.04 by default), Fedora and CentOS, whose LibTorch is
# not the kit's (Ubuntu 22.04 has 1.8.1, without the CPU autocast labs 05/07/09 use; 24.04 has
# none). There the kit runs in a Debian 12 root made here with debootstrap and entered with
# proot, which needs no privileges and brings /proc along (a Docker build cannot mount /proc into
# a chroot, and the kit's programs read it). Both tools come from the base image's own packages;
# the root lives outside /autograder, which proot binds into it.
DEBIAN_ROOT=${DDPLAB_DEBIAN_ROOT:-/opt/ddplab-debian12}
. /etc/os-release
if [ "${ID:-}" != debian ] || [ "${VERSION_ID:-}" != 12 ]; then
  if [ ! -x "$DEBIAN_ROOT/usr/bin/apt-get" ]; then
    echo "setup.sh: ${PRETTY_NAME:-this system} is not Debian 12: making a Debian 12 root in $DEBIAN_ROOT"
    if command -v apt-get >/dev/null; then
      apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap proot debian-archive-keyring
    else
      dnf install -y debootstrap proot
    fi
    rm -rf "$DEBIAN_ROOT.tmp"
    debootstrap --keyring="$KIT/debian-archive-keyring.gpg" --variant=minbase bookworm "$DEBIAN_ROOT.tmp" \
      http://deb.debian.org/debian
    mv "$DEBIAN_ROOT.tmp" "$DEBIAN_ROOT"
  fi
  # The kit's packages go in with apt under a plain chroot (Docker keeps CAP_SYS_CHROOT; apt needs
  # no /proc): under proot, apt cannot read its archive keys (proot 5.1 does not translate the
  # path of glibc 2.36's faccessat2), so 'apt-get update' fails its signature check there.
  cp tools/setup-debian.sh "$DEBIAN_ROOT/root/ddplab-setup-debian.sh"
  if chroot "$DEBIAN_ROOT" /bin/true 2>/dev/null; then
    chroot "$DEBIAN_ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
      /bin/bash /root/ddplab-setup-debian.sh
  else
    echo "setup.sh: chroot is not allowed here; installing through proot (apt warns that it cannot read its keys)"
    proot -0 -R "$DEBIAN_ROOT" /bin/bash /root/ddplab-setup-debian.sh
  fi
  # proot starts every program through a loader it writes to a temporary file only root may run;
  # a program the grader's sandbox runs as another uid could not start. run_autograder names this
  # copy, which anyone may run, in PROOT_LOADER.
  if [ ! -x /opt/ddplab-proot-loader ]; then
    t=$(mktemp -d)
    proot -R "$DEBIAN_ROOT" /bin/sleep 3 &
    pid=$!  # its loader is /tmp/prooted-<pid>-XXXXXX while it runs (Ubuntu's proot 5.1 ignores PROOT_TMP_DIR)
    for _ in $(seq 50); do
      loader=$(find /tmp -maxdepth 1 -name "prooted-$pid-*" -print -quit)
      [ -n "$loader" ] && cp "$loader" "$t/loader" && break
      sleep 0.1
    done
    wait
    [ -s "$t/loader" ] || { echo "setup.sh: could not copy proot's loader" >&2; exit 1; }
    install -m 0755 "$t/loader" /opt/ddplab-proot-loader
    rm -rf "$t"
  fi
  # -R binds /proc, /dev, /sys, /tmp and the host's name resolution; -0: the kit's set-up sees
  # root where the build does not run as root.
  exec proot -0 -R "$DEBIAN_ROOT" -b "$KIT" -w "$KIT" /usr/bin/env DDPLAB_KIT="$KIT" \
    /bin/bash "$KIT/tools/gradescope/setup.sh"
fi
LAB=$(tr -d '[:space:]' < autograder_lab)
tools/setup-debian.sh
# One build of the kit with both trees (the solutions calibrate the machine); submissions are
# compiled into its submission slot.
./kit build labs -DDDPLAB_BUILD_BOTH_TREES=ON
BIN=build/labs/bin
# The data set the runs train on, and this machine's reference figures for the lab.
"$BIN/ddplab" data gen --out data/ctr-small --train 1000000 --test 100000
"$BIN/ddplab" grade "$LAB" --calibrate --data data/ctr-small --quiet
# The submission slot pre-built: grading the skeleton once compiles the lab's driver and tests
# into it, so each submission compiles only the student's files.
"$BIN/ddplab" grade "$LAB" --submission "labs/$LAB" --data data/ctr-small --out /tmp/ddplab-warm --quiet || true
rm -rf /tmp/ddplab-warm
# Where bubblewrap cannot run (a container without user namespaces), run_autograder's grader runs
# student programs as uid 65534 and compiles a submission as uid 65533, which the file system must
# keep out of what only the grader may read: the solutions, their binaries and the calibration.
# The rest of the kit stays readable; the folder holding it is traversable, not listable. The
# grader checks all of this before each grading (docs/instructor-guide.md, "Sandbox").
chmod -R go-rwx solutions build/labs/solutions build/labs/grader/calibration.json
find build/labs -name '*_student_solutions.a' -exec chmod go-rwx {} +
chmod 0711 "$(dirname "$(pwd -P)")"
