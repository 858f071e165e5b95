"""The ``prebuilt`` builder: scores workflows that already exist on one lane."""
