"""Resume: a re-run sends only the rows never delivered, after checking the ones it skips.

``slices`` cuts a re-run's input down to the positions coverage lacks; ``check`` verifies, while the
resume streams, that rows at covered positions are the ones delivered; ``truth`` catches up with the
table's own record of delivered positions (any host); ``pieces`` stacks these layers over one write.

Empty on purpose: importing the package loads nothing (an Airflow DAG file's parse imports the core).
"""
