"""The fuzzer's settings, from the environment (test_fuzz.py's docstring says what each does)."""

import os

import lazyfuse

# Not by default on CUDA: there eager's writes into a view whose elements overlap are races
# between threads (which of the writes lands is not defined), and its setitem fills a CUDA tensor
# where it copies into a lazy one (fill_ makes no overlap check, copy_ raises).
_ON_CUDA = lazyfuse.hardware_device().startswith("cuda")
OVERLAP = os.environ.get("LAZYFUSE_FUZZ_OVERLAP", "0" if _ON_CUDA else "1") == "1"
STEPS = int(os.environ.get("LAZYFUSE_FUZZ_STEPS", "24"))
LONG_PROGRAMS = int(os.environ.get("LAZYFUSE_FUZZ_PROGRAMS", "0"))
LONG_START = int(os.environ.get("LAZYFUSE_FUZZ_SEED", "1000000"))
REDUCE = os.environ.get("LAZYFUSE_FUZZ_REDUCE", "1") != "0"
# KNOWN_BUGS: lazyfuse bugs this fuzzer found, whose cases it leaves out so that the fixed seeds
# pass; LAZYFUSE_FUZZ_KNOWN_BUGS=1 generates them again (to check a fix):
# (Fixed since, and generated again: as_strided of a view or of a tensor not laid out as its
# storage (x[1:], x.t(), x[0], x.t().exp()), which read the wrong elements or failed at the sync
# (Note [as_strided of a view]); writes through as_strided of a view, through an unfold
# that leaves elements out or of a permuted view, through an expand of a bool tensor, and
# through a non-overlapping part of an overlapping view (Note [Writes into views that overlap
# themselves]); mask assignment into a permuted view, which left it contiguous (an eagerly run
# write keeps the written tensor's geometry: recorder.cpp runEagerly); and logical_and/or of a
# permuted input, which gave contiguous results.)
# - elementwise results of an input with a one-element dim whose stride is not its largest
#   (an unfold's window dim) have other strides than eager's (see
#   fuzz_tensors.odd_unit_strides); and the strides of one-element dims may differ from eager's,
#   which changes eager's overlap checks (y = x.diagonal(2, 2, 0).relu();
#   y.copy_(y.flatten().reshape(2, 1)) raises on lazy only).
KNOWN_BUGS = os.environ.get("LAZYFUSE_FUZZ_KNOWN_BUGS") == "1"
FIXED_FUSION = os.environ.get("LAZYFUSE_FUSION")

# Tags of Generator.tags (views): no write into a tensor that has one of these.
WRITE_EXCLUDED = frozenset([] if OVERLAP else ["overlap"])
