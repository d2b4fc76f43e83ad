// Copyright 2026 The Strata Authors.
