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
