"""KerasTuner sweeps over the classifier (`python -m tuning.sweep`)."""
