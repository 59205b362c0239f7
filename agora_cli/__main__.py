"""Run the agora command line: ``python -m agora_cli``."""

from agora_cli.cli import main

if __name__ == "__main__":
    main()
