"""cactus-bench: a harness for Cactus and other speculative-sampling acceptance rules."""

__version__ = "0.1.0"
