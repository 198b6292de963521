"""The local twin: emulated AWS, a world simulator and a local model server (vLLM or the simulator)."""
