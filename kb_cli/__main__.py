from kb_cli.cli import main

main()
