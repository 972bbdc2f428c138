import sys

from engine.cli import main

sys.exit(main(["serve", *sys.argv[1:]]))
