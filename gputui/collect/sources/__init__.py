"""Where GPU readings come from, behind one interface (base.Source): NVML, its tape, the demo, replay."""
