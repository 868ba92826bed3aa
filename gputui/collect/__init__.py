"""Everything that reads the machine. Never imports Textual."""
