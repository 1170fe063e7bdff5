#!/usr/bin/env bash
# it_fed_delta_download.sh with the deltas' steps named 8 bits wide
# (model_delta { bits: 8 }): the width the default is not.
export DELTA_BITS=8
source "$FA_SRC/tests/integration/it_fed_delta_download.sh"
