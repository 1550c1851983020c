"""The answering policy: candidates, grounded choice, the source merge and the selective decision."""
