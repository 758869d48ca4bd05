"""Pure decisions of the reach layer: when to retry, when to stop calling a channel, how fast
to send. Nothing here does I/O or reads a real clock unless handed one, so every rule is tested
on a fake clock and a seeded random generator."""
