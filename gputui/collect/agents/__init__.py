"""Talking to the in-process agents (gputui.agent) over their sockets, and checking what they reply."""
