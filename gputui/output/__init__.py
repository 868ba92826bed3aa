"""What gputui writes without a screen: --once text, --json snapshots, recordings and their schema check."""
