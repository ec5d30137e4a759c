// Stage unit tests live in this target (see the other files).
