"""Plain data of the runtime: ticks, commands, run state and step results."""
