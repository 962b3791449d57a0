import os
import sys

# Test helper modules (conformance.py, models/) import by bare name.
sys.path.insert(0, os.path.dirname(__file__))
