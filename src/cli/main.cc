// Copyright 2026 The Strata Authors.
#include "cli/cli.h"

int main(int argc, char** argv) { return strata::cli::Main(argc, argv); }
