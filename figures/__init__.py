"""Figures of the reproduction (`make figures`): PNG and PDF files drawn from the results files of
`reproduce.experiments` and of the pipeline demo; every file is written atomically."""
