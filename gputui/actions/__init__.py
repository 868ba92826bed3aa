"""What gputui does to processes: signals (kill, with the create-time check), the kill plan, stacks
(py-spy), attach."""
