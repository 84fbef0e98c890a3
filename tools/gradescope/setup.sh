#!/usr/bin/env bash
# Gradescope autograder set-up (runs once, as root, when Gradescope builds the image).
# The autograder zip holds this kit; Gradescope unpacks it to /autograder/source.
# Use a Debian 12 base image ("Manual Docker configuration" with debian:bookworm, or any image
# where tools/setup-debian.sh works): the kit needs Debian's LibTorch, Gloo and OpenBLAS.
# Guide: docs/instructor-guide.md, "Gradescope".
set -euo pipefail
KIT=/autograder/source
cd "$KIT"
tools/setup-debian.sh
# One build of the kit with both trees (the solutions calibrate the machine); submissions are
# compiled into its submission slot, so grading one compiles only the student's files.
./kit build labs -DDDPLAB_BUILD_BOTH_TREES=ON
# The data set the runs train on, and the reference figures of this machine (the solutions are
# in the kit the instructor uploads; students never see this image).
build/labs/bin/ddplab data gen --out data/ctr-small --train 1000000 --test 100000
build/labs/bin/ddplab grade --all --calibrate --data data/ctr-small
