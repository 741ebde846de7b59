"""What every training job shares around TRL: its output folder and final summary, the TRL config
fields it decides, the per-step log line, and the weights probe."""
