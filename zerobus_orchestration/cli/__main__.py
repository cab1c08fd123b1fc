from zerobus_orchestration.cli.main import main

main()
