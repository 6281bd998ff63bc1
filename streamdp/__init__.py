"""streamdp: differentially private continual releases from event streams."""
__version__ = "0.1.0"
