"""Beyond one machine: a Prometheus exporter (`gputui export`) and the fleet reader (`gputui fleet`).

Never imports Textual: the exporter runs headless on every GPU box.
"""
