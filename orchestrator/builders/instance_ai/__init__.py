"""The ``instance-ai`` builder: n8n's own agent over chat, its simulated user, seeds and fixtures."""
