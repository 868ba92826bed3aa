"""`gputui doctor`: "why isn't my GPU being used?", answered one check per line.

Facts are gathered (facts.py, torch_probe.py) and judged by pure functions (checks_*.py), so every
verdict can be reached in a test from made-up facts as well as from a real machine. Never imports
Textual, never imports torch: PyTorch is asked in a subprocess of the user's Python, so the doctor itself
creates no CUDA context.
"""
