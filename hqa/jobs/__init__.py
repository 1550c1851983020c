"""The user jobs, one shape each: evaluate, batch, compile and compare, with their budget."""
