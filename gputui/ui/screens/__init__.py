"""Screens over the main one: detail, kill, attach, allocator, events, doctor, columns, leftovers,
fleet host."""
