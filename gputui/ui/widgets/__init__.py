"""The main screen's widgets and what they draw with: GPU panes, process table, header, key bar, canvas."""
