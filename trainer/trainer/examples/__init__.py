"""Examples the READMEs refer to, shipped so that they run in the trainer image and are tested."""
