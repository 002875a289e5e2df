"""AgentFly's published training scripts (``examples/train_scripts/`` at commit 1256586), as the
shell passes their words to ``python -m agentfly.cli train`` (or, for ``run_gui_agent.sh`` and
``vqa/run_vlm_qa.sh``, to ``verl.trainer.main_ppo``, which takes the same words).

Transcribed here, not read from their files: each script's shell variables expanded by hand as
bash would (``$((a * b))`` computed, ``$(basename $model)`` taken, quotes removed, so
``['console','wandb']`` arrives as ``[console,wandb]``), a ``.slurm`` script's ``$worker_num``
its ``#SBATCH --nodes``, and its multi-line system prompt passed as
``"agent.init_config.system_prompt=\\"${system_prompt}\\""`` keeps one level of double quotes.
AgentFly's slips are kept as the shell makes them: ``train_alfworld.sh`` never sets
``max_new_tokens_per_turn`` (so ``...max_tokens=`` is empty), ``swe/train_swe_r2e_gym.sh`` never
sets ``template`` (``agent.init_config.template=``), ``train_science_world.slurm`` sets the
template twice, and the back-quoted words of ``train_science_world_ray.sh``'s rules prompt are
command substitutions that leave nothing.

Each entry of :data:`SCRIPTS`: ``script`` (its path under ``examples/train_scripts/``), ``args``
(the words, in order), ``env`` (what it exports that the run may read) and ``missing`` (``None``
when agentfly has all it names; else the short reason it stops, which
``tests/test_agentfly_scripts.py`` checks agentfly's refusal names, so that when the name lands
the test is updated).
"""

from agentfly.rollout.agents.swe_prompts import QWEN3CODER_SYSTEM_PROMPT
from tests.config.verl_commands import KEY_REFERENCE_WEBSHOP, WEBSHOP_SYSTEM_PROMPT

ALFWORLD_SHORT_PROMPT = (
    "Navigate the ALFWorld environment and complete tasks by interacting with objects. Use the tools provided to step through the environment. when you keep getting Nothing happens as a feedback use admissible commands to see why becasue it's very likely your action / command is wrong !!!"
)

ALFWORLD_PROMPT = """\
You are an ALFWorld agent operating in an interactive, text-based household environment (derived from the ALFRED benchmark). You are placed in one of 120 possible rooms (kitchen, bedroom, bathroom, or living room) populated with portable objects (e.g., apple, mug, book) and static receptacles (e.g., microwave, fridge, drawer, countertop). Your goal is to complete the given household task by interacting with the world through high-level text commands, and to finish it in as few steps as possible. The environment is partially observable: the initial observation lists all navigable receptacles in the room, but you must actively go to receptacles, open them, and examine their contents to find target objects.

You must conduct reasoning inside <think> and </think> first every time you get new information. After reasoning, you can do one action by <action> action </action>. If you think you have finished the task, summarize what you have done.

ALFWorld tasks fall into six categories. Recognize your task type from the goal and plan accordingly:
- Pick & Place (e.g., put a plate on the coffee table): find the object, pick it up, go to the target receptacle, put it down.
- Examine in Light (e.g., examine a book under the lamp): find the object, pick it up, go to a lamp, turn on the lamp while holding the object.
- Clean & Place (e.g., put a clean knife in the drawer): find the object, pick it up, go to a sinkbasin, clean it there, then place it at the target receptacle.
- Heat & Place (e.g., put a hot mug on the coffee table): find the object, pick it up, go to a microwave, heat it there, then place it at the target receptacle.
- Cool & Place (e.g., put a cool bottle on the countertop): find the object, pick it up, go to a fridge, cool it there, then place it at the target receptacle.
- Pick Two & Place (e.g., put two pencils in the drawer): find one instance, place it at the target; then find a second instance, place it there too.

AVAILABLE ACTIONS (objects and receptacles are referred to by class name plus an ID, e.g., mug 1, countertop 2):

Navigation & sensing:
- go to [receptacle]: move to a receptacle (e.g., go to countertop 1). Only one receptacle at a time.
- look: describe the current location and what is visible.
- examine [object/receptacle]: look more closely at an object or receptacle to get detailed information.
- inventory: list what you are currently carrying.

Object manipulation:
- take [object] from [receptacle]: pick up an object from a receptacle (you must already be at that receptacle).
- put [object] in/on [receptacle]: place a held object into or onto a receptacle.
- open [receptacle]: open a closed receptacle (e.g., drawer, cabinet, fridge, microwave, safe) to see and access its contents.
- close [receptacle]: close an open receptacle.

Task-specific interactions:
- use [object]: use a device such as a desklamp (required for Examine in Light tasks; turn on the lamp while holding the target object).
- heat [object] with [receptacle]: heat a held object using a microwave (you must be at the microwave).
- cool [object] with [receptacle]: cool a held object using a fridge (you must be at the fridge).
- clean [object] with [receptacle]: clean a held object using a sinkbasin (you must be at the sinkbasin).
- toggle [object]: toggle a device on or off.

Remember that you must put your action inside <action> and </action> tags."""

SCIENCEWORLD_PROMPT = """\
You are a ScienceWorld agent operating in an interactive, text-based environment that simulates elementary-school science tasks (e.g., thermodynamics, simple circuits, chemistry, biology). Your goal is to complete the current task by interacting with the world through text commands, earning the highest possible task score, and finishing efficiently. The environment is partially observable; you must actively examine rooms, containers, and your inventory to gather needed information.
You must conduct reasoning inside <think> and </think> first every time you get new information. After reasoning, you can do one action by <action> action </action>. If you think you have finished the task, summarize what you have done.

AVAILABLE ACTIONS (you may use these; some take 0, 1, or 2 arguments):
Core navigation & sensing:
- go to [location]: move to a new location
- look around: describe the current room
- look at [object]: describe an object in detail
- look in [container]: describe a container's contents
- read [object]: read a note or book
- focus on [object]: signal intent on a task object
- task: describe current task
- inventory: list agent's inventory
- wait [duration]: take no action for some duration

Object manipulation:
- pick up [object]: move an object to the inventory
- put down [object]: drop an inventory item
- move [object] to [container]: move an object to a container
- open [object]: open a container
- close [object]: close a container
- activate [object]: activate a device
- deactivate [object]: deactivate a device
- use [tool] [on [object]]: use a device/item

Liquids & chemistry:
- pour [liquid/container] into [container]: pour a liquid into a container
- dunk [container] into [liquid]: dunk a container into a liquid
- mix [container]: chemically mix a container

Living things / misc:
- eat [object]: eat a food
- flush [object]: flush a toilet

Electricity (for simple circuits):
- connect [object] to [object]: connect electrical components
- disconnect [object]: disconnect electrical components

Remember that you must put your action inside <action> and </action> tags."""

SCIENCEWORLD_ANGLE_PROMPT = """\
You are a ScienceWorld agent operating in an interactive, text-based environment that simulates elementary-school science tasks (e.g., thermodynamics, simple circuits, chemistry, biology). Your goal is to complete the current task by interacting with the world through text commands, earning the highest possible task score, and finishing efficiently. The environment is partially observable; you must actively examine rooms, containers, and your inventory to gather needed information.
You must conduct reasoning inside <think> and </think> first every time you get new information. After reasoning, you can do one action by <action> action </action>. If you think you have finished the task, summarize what you have done.

AVAILABLE ACTIONS (you may use these; some take 0, 1, or 2 arguments):
Core navigation & sensing:
- go to <location>: move to a new location
- look around: describe the current room
- look at <object>: describe an object in detail
- look in <container>: describe a container's contents
- read <object>: read a note or book
- focus on <object>: signal intent on a task object
- task: describe current task
- inventory: list agent's inventory
- wait <duration>: take no action for some duration

Object manipulation:
- pick up <object>: move an object to the inventory
- put down <object>: drop an inventory item
- move <object> to <container>: move an object to a container
- open <object>: open a container
- close <object>: close a container
- activate <object>: activate a device
- deactivate <object>: deactivate a device
- use <tool> [on <object>]: use a device/item

Liquids & chemistry:
- pour <liquid/container> into <container>: pour a liquid into a container
- dunk <container> into <liquid>: dunk a container into a liquid
- mix <container>: chemically mix a container

Living things / misc:
- eat <object>: eat a food
- flush <object>: flush a toilet

Electricity (for simple circuits):
- connect <object> to <object>: connect electrical components
- disconnect <object>: disconnect electrical components

Remember that you must put your action inside <action> and </action> tags."""

SCIENCEWORLD_NO_ACTION_PROMPT = """\
You are a ScienceWorld agent operating in an interactive, text-based environment that simulates elementary-school science tasks (e.g., thermodynamics, simple circuits, chemistry, biology). Your goal is to complete the current task by interacting with the world through text commands, earning the highest possible task score, and finishing efficiently. The environment is partially observable; you must actively examine rooms, containers, and your inventory to gather needed information.
You must conduct reasoning inside <think> and </think> first every time you get new information.

AVAILABLE ACTIONS (you may use these; some take 0, 1, or 2 arguments):
Core navigation & sensing:
- go to [location]: move to a new location
- look around: describe the current room
- look at [object]: describe an object in detail
- look in [container]: describe a container's contents
- read [object]: read a note or book
- focus on [object]: signal intent on a task object
- task: describe current task
- inventory: list agent's inventory
- wait [duration]: take no action for some duration

Object manipulation:
- pick up [object]: move an object to the inventory
- put down [object]: drop an inventory item
- move [object] to [container]: move an object to a container
- open [object]: open a container
- close [object]: close a container
- activate [object]: activate a device
- deactivate [object]: deactivate a device
- use [tool] [on [object]]: use a device/item

Liquids & chemistry:
- pour [liquid/container] into [container]: pour a liquid into a container
- dunk [container] into [liquid]: dunk a container into a liquid
- mix [container]: chemically mix a container

Living things / misc:
- eat [object]: eat a food
- flush [object]: flush a toilet

Electricity (for simple circuits):
- connect [object] to [object]: connect electrical components
- disconnect [object]: disconnect electrical components"""

SCIENCEWORLD_RULE_PROMPT = """\
You are a ScienceWorld agent operating in an interactive, text-based environment that simulates elementary-school science tasks (e.g., thermodynamics, simple circuits, chemistry, biology). Your goal is to complete the current task by interacting with the world through text commands, earning the highest possible task score, and finishing efficiently. The environment is partially observable; you must actively examine rooms, containers, and your inventory to gather needed information.
You must conduct reasoning inside <think> and </think> first every time you get new information. After reasoning, you can do one action by <action> action </action>. If you think you have finished the task, summarize what you have done.

AVAILABLE ACTIONS (you may use these; some take 0, 1, or 2 arguments):
Core navigation & sensing:
- go to [location]: move to a new location
- look around: describe the current room
- look at [object]: describe an object in detail
- look in [container]: describe a container's contents
- read [object]: read a note or book
- focus on [object]: signal intent on a task object
- task: describe current task
- inventory: list agent's inventory
- wait [duration]: take no action for some duration

Object manipulation:
- pick up [object]: move an object to the inventory
- put down [object]: drop an inventory item
- move [object] to [container]: move an object to a container
- open [object]: open a container
- close [object]: close a container
- activate [object]: activate a device
- deactivate [object]: deactivate a device
- use [tool] [on [object]]: use a device/item

Liquids & chemistry:
- pour [liquid/container] into [container]: pour a liquid into a container
- dunk [container] into [liquid]: dunk a container into a liquid
- mix [container]: chemically mix a container

Living things / misc:
- eat [object]: eat a food
- flush [object]: flush a toilet

Electricity (for simple circuits):
- connect [object] to [object]: connect electrical components
- disconnect [object]: disconnect electrical components

RULES:

- Act only on objects visible in the current room or your inventory. If an object is elsewhere, navigate to it first.
- Open closed containers and passages before traversing or accessing their contents. If a request is ambiguous, name the specific target.
- Replace bracketed placeholders with concrete names. Brackets in this prompt are notation, not literal syntax.
- Issue one action per turn. Do not chain multiple verbs with and or commas.
- Match verbs to object types: tools and devices take ; electrical components take .
- If an action returns an error, do not repeat it.

Remember that you must put your action inside <action> and </action> tags."""

SEARCH_R1_PROMPT = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> query </search> and it will return the top searched results between <information> and </information>. You can search as many times as your want. If you find no further external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>."
)

TOOL_CALL_PROMPT = (
    "Answer the given question. At the start of each turn, you must conduct some reasoning. After reasoning, if you find you lack some knowledge, you can call a search engine by generating the tool calling and it will return the top searched results. You can search as many times as your want. If you find no further external knowledge needed, you need to provide a short and simple answer by calling the answer tool."
)

# the SWE scripts' system prompt: AgentFly's Qwen3-Coder SWE prompt, word for word as the
# qwen3coder_swe agent carries it (compared equal when transcribed)
SWE_PROMPT = QWEN3CODER_SYSTEM_PROMPT


# train_example.sh
TRAIN_EXAMPLE = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/math/gsm8k_train.json",
    "data.val_files=./data/rlhf/math/gsm8k_test.json",
    "data.train_batch_size=64",
    "agent.init_config.agent_type=hf",
    "agent.init_config.tools=[calculator]",
    "agent.init_config.model_name_or_path=Qwen/Qwen2.5-3B-Instruct",
    "agent.init_config.backend=async_verl",
    "agent.init_config.reward_name=math_equal_reward_tool",
    "agent.init_config.max_model_len=8192",
    "agent.generation_config.max_tokens=512",
    "agent.max_turns=1",
    "agent.num_chains=8",
    "agent.use_agent=True",
    "actor_rollout_ref.actor.optim.lr=5e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen2.5-3B-Instruct",
    "critic.ppo_mini_batch_size=64",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=AgentRL",
    "trainer.experiment_name=test_gsm8k",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.save_freq=50",
    "trainer.test_freq=10",
    "trainer.total_training_steps=100",
    "trainer.val_before_train=True",
]

# alfworld/train_alfworld.sh
TRAIN_ALFWORLD = [
    "algorithm.adv_estimator=reinforce_plus_plus",
    "data.train_files=./data/rlhf/alfworld/alfworld_train_tasks_flat.json",
    "data.val_files=./data/rlhf/alfworld/alfworld_val_tasks.json",
    "data.val_batch_size=256",
    "data.train_batch_size=4",
    "agent.use_agent=True",
    "agent.init_config.agent_type=action",
    "agent.init_config.model_name_or_path=Qwen/Qwen2.5-3B-Instruct",
    "agent.init_config.template=action-agent",
    'agent.init_config.system_prompt="' + ALFWORLD_SHORT_PROMPT + '"',
    "agent.init_config.max_model_len=8192",
    "agent.init_config.tools=[alfworld_step,alfworld_get_admissible_commands,alfworld_get_task_objective]",
    "agent.init_config.reward_name=alfworld_episode_reward",
    "agent.run_config.generation_config.max_tokens=",
    "agent.run_config.max_turns=10",
    "agent.run_config.num_chains=4",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.actor.ppo_mini_batch_size=16",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.01",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.01",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "actor_rollout_ref.actor.fsdp_config.param_offload=true",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.75",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=False",
    "critic.model.path=Qwen/Qwen2.5-3B-Instruct",
    "critic.ppo_mini_batch_size=16",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "algorithm.kl_ctrl.kl_coef=0.01",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Open",
    "trainer.experiment_name=Qwen/Qwen2.5-3B-Instruct-alfworld-1e-6-512-bs4-n4-klmse0.01-entropy0.01-10turns-reinforce_plus_plus",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.save_freq=50",
    "trainer.test_freq=25",
    "trainer.total_training_steps=200",
    "trainer.val_before_train=False",
]

# alfworld/train_alfworld_ray.sh
TRAIN_ALFWORLD_RAY = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/alfworld/alfworld_train_tasks_flat.json",
    "data.val_files=./data/rlhf/alfworld/alfworld_val_tasks.json",
    "data.val_batch_size=256",
    "data.train_batch_size=64",
    "agent.use_agent=True",
    "agent.init_config.agent_type=action",
    "agent.init_config.model_name_or_path=Qwen/Qwen2.5-3B-Instruct",
    "agent.init_config.template=action-agent",
    'agent.init_config.system_prompt="' + ALFWORLD_PROMPT + '"',
    "agent.init_config.max_model_len=8192",
    "agent.init_config.tools=[alfworld_step]",
    "agent.init_config.reward_name=alfworld_episode_reward",
    "agent.run_config.generation_config.max_tokens=256",
    "agent.run_config.max_turns=10",
    "agent.run_config.num_chains=8",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr=1e-6",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.actor.ppo_mini_batch_size=512",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.01",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.01",
    "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    "actor_rollout_ref.actor.fsdp_config.param_offload=true",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.75",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=False",
    "critic.model.path=Qwen/Qwen2.5-3B-Instruct",
    "critic.ppo_mini_batch_size=512",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "algorithm.kl_ctrl.kl_coef=0.01",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Open",
    "trainer.experiment_name=Qwen/Qwen2.5-3B-Instruct-alfworld-1e-6-512-bs64-n8-klmse0.01-entropy0.01-10turns-grpo",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=50",
    "trainer.test_freq=25",
    "trainer.total_training_steps=200",
    "trainer.val_before_train=False",
]

# run_gui_agent.sh: as published, its agent.num_chains=8 and rollout.n=4 are one key in agentfly
# (refused); with one chain count it trains
RUN_GUI_AGENT = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=data/rlhf/gui/gui_r1_train.parquet",
    "data.val_files=data/rlhf/gui/gui_r1_test.parquet",
    "data.val_batch_size=512",
    "data.train_batch_size=64",
    "agent.use_agent=True",
    "agent.init_config.agent_type=gui",
    "agent.init_config.template=qwen2.5-vl",
    "agent.init_config.model_name_or_path=Qwen/Qwen2.5-VL-3B-Instruct",
    "agent.init_config.reward_name=gui_reward",
    "agent.init_config.tools=[pyautogui_code_generator]",
    "agent.generation_config.max_tokens=512",
    "agent.max_turns=4",
    "agent.num_chains=8",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-VL-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr=4e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.01",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen2.5-VL-3B-Instruct",
    "critic.ppo_mini_batch_size=4",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Open",
    "trainer.experiment_name=gui_agent",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=50",
    "trainer.test_freq=10",
    "trainer.total_training_steps=200",
    "trainer.val_before_train=False",
]

# scienceworld/train_science_world.sh
TRAIN_SCIENCE_WORLD = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/scienceworld/scienceworld_train.json",
    "data.val_files=./data/rlhf/scienceworld/scienceworld_test.json",
    "data.val_batch_size=512",
    "data.train_batch_size=2",
    "agent.use_agent=True",
    "agent.init_config.agent_type=action",
    'agent.init_config.system_prompt="' + SCIENCEWORLD_PROMPT + '"',
    "agent.init_config.max_model_len=16384",
    "agent.init_config.tools=[scienceworld_explorer]",
    "agent.init_config.template=action-agent",
    "agent.init_config.model_name_or_path=Qwen/Qwen2.5-3B-Instruct",
    "agent.init_config.reward_name=scienceworld_reward",
    "agent.generation_config.max_tokens=256",
    "agent.max_turns=20",
    "agent.num_chains=2",
    "actor_rollout_ref.actor.optim.lr=4e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.08",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.60",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen2.5-3B-Instruct",
    "critic.ppo_mini_batch_size=32",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Resource",
    "trainer.experiment_name=scienceworld_qwen2.5-3b-instruct_resource",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.save_freq=50",
    "trainer.test_freq=300",
    "trainer.total_training_steps=300",
    "trainer.val_before_train=False",
]

# scienceworld/train_science_world.slurm
TRAIN_SCIENCE_WORLD_SLURM = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/scienceworld/scienceworld_train.json",
    "data.val_files=./data/rlhf/scienceworld/scienceworld_test.json",
    "data.val_batch_size=512",
    "data.train_batch_size=64",
    "agent.use_agent=True",
    "agent.init_config.template=action-agent",
    "agent.init_config.agent_type=action",
    'agent.init_config.system_prompt="' + SCIENCEWORLD_ANGLE_PROMPT + '"',
    "agent.init_config.max_model_len=16384",
    "agent.init_config.tools=[scienceworld_explorer]",
    "agent.init_config.template=action-agent",
    "agent.init_config.model_name_or_path=Qwen/Qwen2.5-7B-Instruct",
    "agent.init_config.backend=async_verl",
    "agent.init_config.reward_name=scienceworld_reward",
    "agent.generation_config.max_tokens=256",
    "agent.max_turns=24",
    "agent.num_chains=8",
    "actor_rollout_ref.actor.optim.lr=4e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.08",
    "actor_rollout_ref.actor.ppo_mini_batch_size=512",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.60",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen2.5-7B-Instruct",
    "critic.ppo_mini_batch_size=32",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Algorithm",
    "trainer.experiment_name=scienceworld_qwen2.5-7b-instruct",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=2",
    "trainer.save_freq=50",
    "trainer.test_freq=300",
    "trainer.total_training_steps=300",
    "trainer.val_before_train=False",
]

# scienceworld/train_science_world_qwen35_ray.slurm
TRAIN_SCIENCE_WORLD_QWEN35_RAY_SLURM = [
    "algorithm.adv_estimator=gae",
    "data.train_files=./data/rlhf/scienceworld/scienceworld_train.json",
    "data.val_files=./data/rlhf/scienceworld/scienceworld_test.json",
    "data.val_batch_size=512",
    "data.train_batch_size=32",
    "agent.use_agent=True",
    "agent.init_config.agent_type=hf",
    'agent.init_config.system_prompt="' + SCIENCEWORLD_NO_ACTION_PROMPT + '"',
    "agent.init_config.tool_parser_name=qwen3_coder",
    "agent.init_config.max_model_len=16384",
    "agent.init_config.tools=[scienceworld_explorer]",
    "agent.init_config.template=qwen3-think",
    "agent.init_config.model_name_or_path=Qwen/Qwen3.5-4B",
    "agent.init_config.reward_name=scienceworld_reward",
    "agent.run_config.generation_config.max_tokens=512",
    "agent.run_config.max_turns=30",
    "agent.run_config.num_chains=4",
    "agent.run_config.context_config.resource_backend=ray",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.optim.lr=4e-7",
    "actor_rollout_ref.model.path=Qwen/Qwen3.5-4B",
    "actor_rollout_ref.actor.fsdp_config.model_dtype=bf16",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.08",
    "actor_rollout_ref.actor.ppo_mini_batch_size=128",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.60",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size=4",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "actor_rollout_ref.ref.fsdp_config.model_dtype=bf16",
    "critic.enable=True",
    "critic.model.path=Qwen/Qwen3.5-4B",
    "critic.fsdp.model_dtype=bf16",
    "critic.optim.lr=1e-5",
    "critic.ppo_mini_batch_size=32",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "algorithm.gamma=0.99",
    "algorithm.lam=0.95",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Context",
    "trainer.experiment_name=scienceworld_Qwen3.5-4B_gae_new",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=2",
    "trainer.save_freq=50",
    "trainer.test_freq=300",
    "trainer.total_training_steps=300",
    "trainer.val_before_train=False",
]

# scienceworld/train_science_world_ray.sh
TRAIN_SCIENCE_WORLD_RAY = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/scienceworld/scienceworld_train.json",
    "data.val_files=./data/rlhf/scienceworld/scienceworld_test.json",
    "data.val_batch_size=512",
    "data.train_batch_size=32",
    "agent.use_agent=True",
    "agent.init_config.agent_type=action",
    'agent.init_config.system_prompt="' + SCIENCEWORLD_RULE_PROMPT + '"',
    "agent.init_config.max_model_len=16384",
    "agent.init_config.tools=[scienceworld_explorer]",
    "agent.init_config.template=action-agent",
    "agent.init_config.model_name_or_path=Qwen/Qwen3-4B-Instruct-2507",
    "agent.init_config.reward_name=scienceworld_reward",
    "agent.run_config.generation_config.max_tokens=512",
    "agent.run_config.max_turns=30",
    "agent.run_config.num_chains=4",
    "actor_rollout_ref.actor.optim.lr=4e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.path=Qwen/Qwen3-4B-Instruct-2507",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.08",
    "actor_rollout_ref.actor.ppo_mini_batch_size=128",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.60",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.enable=False",
    "critic.model.path=Qwen/Qwen3-4B-Instruct-2507",
    "critic.optim.lr=1e-5",
    "critic.ppo_mini_batch_size=32",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "algorithm.gamma=0.99",
    "algorithm.lam=0.95",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Context",
    "trainer.experiment_name=scienceworld_Qwen3-4B-Instruct-2507_grpo_new_setting_system_rule",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=100",
    "trainer.test_freq=300",
    "trainer.total_training_steps=300",
    "trainer.val_before_train=False",
]

# search/train_search_r1.sh
TRAIN_SEARCH_R1 = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/qa/nq_hotpotqa_train.json",
    "data.val_files=./data/rlhf/qa/qa_test.json",
    "data.val_batch_size=512",
    "data.train_batch_size=256",
    "agent.train_on_last_turn=False",
    "agent.use_agent=True",
    "agent.init_config.agent_type=searchr1",
    "agent.init_config.model_name_or_path=Qwen/Qwen3-8B",
    "agent.init_config.template=qwen3-think-no-tool",
    'agent.init_config.system_prompt="' + SEARCH_R1_PROMPT + '"',
    "agent.init_config.max_model_len=16384",
    "agent.init_config.tool_parser_name=hermes",
    "agent.init_config.tools=[search]",
    "agent.init_config.reward_name=qa_em_reward",
    "agent.generation_config.max_tokens=378",
    "agent.max_turns=4",
    "agent.num_chains=5",
    "actor_rollout_ref.model.path=Qwen/Qwen3-8B",
    "actor_rollout_ref.actor.optim.lr=5e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.03",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1280",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen3-8B",
    "critic.ppo_mini_batch_size=256",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=ToolCall",
    "trainer.experiment_name=Qwen3-8B_qwen3-think-no-tool_qa_em_reward_grpo",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=50",
    "trainer.test_freq=200",
    "trainer.total_training_steps=200",
    "trainer.val_before_train=False",
]

# search/train_search_r1_ray.sh
TRAIN_SEARCH_R1_RAY = [
    "algorithm.adv_estimator=sspo_multiturn",
    "data.train_files=./data/rlhf/qa/nq_hotpotqa_train.json",
    "data.val_files=./data/rlhf/qa/qa_test.json",
    "data.val_batch_size=512",
    "data.train_batch_size=256",
    "agent.train_on_last_turn=False",
    "agent.use_agent=True",
    "agent.init_config.agent_type=searchr1",
    "agent.init_config.model_name_or_path=Qwen/Qwen2.5-3B-Instruct",
    "agent.init_config.template=action-agent",
    'agent.init_config.system_prompt="' + SEARCH_R1_PROMPT + '"',
    "agent.init_config.max_model_len=16384",
    "agent.init_config.tool_parser_name=hermes",
    "agent.init_config.tools=[search]",
    "agent.init_config.reward_name=qa_em_reward",
    "agent.run_config.generation_config.max_tokens=378",
    "agent.run_config.max_turns=4",
    "agent.run_config.num_chains=5",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr=5e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.03",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1280",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.enable=True",
    "critic.optim.lr=5e-6",
    "critic.model.path=Qwen/Qwen2.5-3B-Instruct",
    "critic.ppo_mini_batch_size=256",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "algorithm.gamma=0.99",
    "algorithm.lam=0.95",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Open",
    "trainer.experiment_name=Qwen2.5-3B-Instruct_action-agent_qa_em_reward_sspo_multiturn",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=100",
    "trainer.test_freq=200",
    "trainer.total_training_steps=210",
    "trainer.val_before_train=False",
]

# search/train_tool_call_ray.sh
TRAIN_TOOL_CALL_RAY = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/qa/nq_hotpotqa_train.json",
    "data.val_files=./data/rlhf/qa/nq_hotpotqa_test.json",
    "data.val_batch_size=512",
    "data.train_batch_size=256",
    "agent.use_agent=True",
    "agent.init_config.agent_type=hf",
    "agent.init_config.model_name_or_path=Qwen/Qwen3-8B",
    'agent.init_config.system_prompt="' + TOOL_CALL_PROMPT + '"',
    "agent.init_config.max_model_len=16384",
    "agent.init_config.tool_parser_name=hermes",
    "agent.init_config.tools=[search,answer]",
    "agent.init_config.reward_name=qa_em_reward_tool_call",
    "agent.generation_config.max_tokens=378",
    "agent.train_on_last_turn=False",
    "agent.max_turns=4",
    "agent.num_chains=5",
    "actor_rollout_ref.model.path=Qwen/Qwen3-8B",
    "actor_rollout_ref.actor.optim.lr=5e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.03",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen3-8B",
    "critic.ppo_mini_batch_size=256",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=ToolCall",
    "trainer.experiment_name=Qwen3-8B_qa_em_reward_tool_call_grpo",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=50",
    "trainer.test_freq=200",
    "trainer.total_training_steps=200",
    "trainer.val_before_train=False",
]

# simuscene/train_simuscene.slurm
TRAIN_SIMUSCENE_SLURM = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/simuphy/rl_set.json",
    "data.val_files=./data/rlhf/simuphy/val_set.json",
    "data.train_batch_size=32",
    "data.max_prompt_length=2048",
    "agent.init_config.agent_type=hf",
    "agent.init_config.tools=[answer_qa]",
    "agent.init_config.template=deepseek-r1-distill-qwen",
    "agent.init_config.model_name_or_path=/mnt/weka/shrd/ad/haonan.li/ViPhy/new_models/deepseek-r1-distill-qwen-7b_sft-single",
    "agent.init_config.reward_name=vlm_as_judge_pass_reward_multi_model",
    "agent.init_config.max_model_len=16384",
    "agent.run_config.generation_config.max_tokens=14336",
    "agent.run_config.max_turns=1",
    "agent.run_config.num_chains=8",
    "agent.use_agent=True",
    "actor_rollout_ref.actor.optim.lr=5e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.path=/mnt/weka/shrd/ad/haonan.li/ViPhy/new_models/deepseek-r1-distill-qwen-7b_sft-single",
    "actor_rollout_ref.actor.ppo_mini_batch_size=128",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=False",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.actor.clip_ratio_high=0.28",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.prompt_length=2048",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=/mnt/weka/shrd/ad/haonan.li/ViPhy/new_models/deepseek-r1-distill-qwen-7b_sft-single",
    "critic.ppo_mini_batch_size=128",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=SimuScene",
    "trainer.experiment_name=test_vlm_as_judge",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=2",
    "trainer.save_freq=100",
    "trainer.test_freq=20",
    "trainer.total_training_steps=300",
    "trainer.val_before_train=True",
]

# swe/train_swe_r2e_gym.sh
TRAIN_SWE_R2E_GYM = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/os/r2e-gym-lite.json",
    "data.val_files=./data/rlhf/os/r2e-gym-lite.json",
    "data.val_batch_size=512",
    "data.train_batch_size=16",
    "agent.train_on_last_turn=False",
    "agent.use_agent=True",
    "agent.init_config.agent_type=qwen3coder_swe",
    "agent.init_config.model_name_or_path=Qwen/Qwen3.5-9B",
    "agent.init_config.template=",
    "agent.init_config.max_model_len=40960",
    "agent.init_config.tool_parser_name=qwen3_coder",
    "agent.init_config.tools=[create_file,read_file,edit_file,grep_search,undo_edit,run_python]",
    "agent.init_config.reward_name=r2e_gym_reward",
    "agent.run_config.generation_config.max_tokens=4096",
    "agent.run_config.max_turns=24",
    "agent.run_config.num_chains=8",
    "agent.run_config.max_concurrent_chains=48",
    "agent.run_config.context_config.resource_backend=ray",
    "actor_rollout_ref.model.path=Qwen/Qwen3.5-9B",
    "actor_rollout_ref.actor.optim.lr=4e-7",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.01",
    "actor_rollout_ref.actor.ppo_mini_batch_size=128",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.model.enable_activation_offload=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size=2",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen3.5-9B",
    "critic.ppo_mini_batch_size=16",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "critic.model.enable_activation_offload=True",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Resource",
    "trainer.experiment_name=test_swe_train_r2e_gym_postprocess_tools",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=100",
    "trainer.test_freq=300",
    "trainer.total_training_steps=300",
    "trainer.val_before_train=False",
]

# swe/train_swe_r2e_gym.slurm
TRAIN_SWE_R2E_GYM_SLURM = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/os/r2e-gym-lite.json",
    "data.val_files=./data/rlhf/os/r2e-gym-lite.json",
    "data.val_batch_size=512",
    "data.train_batch_size=16",
    "agent.train_on_last_turn=False",
    "agent.use_agent=True",
    "agent.init_config.agent_type=bash_swe",
    "agent.init_config.model_name_or_path=Qwen/Qwen3-32B",
    "agent.init_config.template=qwen3-miniswe",
    "agent.init_config.max_model_len=40960",
    "agent.init_config.tool_parser_name=hermes",
    "agent.init_config.tools=[run_shell_command]",
    "agent.init_config.reward_name=r2e_gym_reward",
    "agent.run_config.generation_config.max_tokens=4096",
    "agent.run_config.max_turns=24",
    "agent.run_config.num_chains=8",
    "agent.run_config.max_concurrent_chains=48",
    "agent.run_config.context_config.resource_backend=ray",
    "actor_rollout_ref.model.path=Qwen/Qwen3-32B",
    "actor_rollout_ref.actor.optim.lr=4e-7",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.01",
    "actor_rollout_ref.actor.ppo_mini_batch_size=128",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.model.enable_activation_offload=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size=2",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen3-32B",
    "critic.ppo_mini_batch_size=16",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "critic.model.enable_activation_offload=True",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Resource",
    "trainer.experiment_name=test_swe_train_r2e_gym_postprocess",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=4",
    "trainer.save_freq=20",
    "trainer.test_freq=300",
    "trainer.total_training_steps=300",
    "trainer.val_before_train=False",
]

# swe/train_swe_r2e_gym_tools.slurm
TRAIN_SWE_R2E_GYM_TOOLS_SLURM = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/os/r2e-gym-lite.json",
    "data.val_files=./data/rlhf/os/r2e-gym-lite.json",
    "data.val_batch_size=512",
    "data.train_batch_size=8",
    "agent.use_agent=True",
    "agent.init_config.agent_type=qwen3coder_swe",
    "agent.init_config.model_name_or_path=Qwen/Qwen3.5-4B",
    "agent.init_config.max_model_len=102400",
    "agent.init_config.tool_parser_name=qwen3_coder",
    "agent.init_config.tools=[create_file,read_file,edit_file,grep_search,undo_edit,run_python]",
    "agent.init_config.reward_name=r2e_gym_reward",
    "agent.run_config.generation_config.max_tokens=4096",
    "agent.run_config.max_turns=50",
    "agent.run_config.num_chains=8",
    "agent.run_config.max_concurrent_chains=48",
    "agent.run_config.context_config.resource_backend=ray",
    "actor_rollout_ref.model.path=Qwen/Qwen3.5-4B",
    "actor_rollout_ref.actor.optim.lr=4e-7",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.model.lora_rank=32",
    "actor_rollout_ref.model.lora_alpha=64",
    "actor_rollout_ref.model.lora.rank=32",
    "actor_rollout_ref.model.lora.alpha=64",
    "actor_rollout_ref.model.target_modules=all-linear",
    "actor_rollout_ref.model.lora.merge=True",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.01",
    "actor_rollout_ref.actor.ppo_mini_batch_size=64",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.model.enable_activation_offload=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=4096",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size=4",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.enable=False",
    "critic.model.path=Qwen/Qwen3.5-4B",
    "critic.optim.lr=5e-6",
    "critic.ppo_mini_batch_size=8",
    "critic.model.use_remove_padding=True",
    "critic.ulysses_sequence_parallel_size=4",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "critic.model.enable_activation_offload=True",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "algorithm.gamma=0.99",
    "algorithm.lam=0.95",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Resource",
    "trainer.experiment_name=swe_r2e_gym_tools_Qwen3.5-4B_grpo_valueposition-first_response_lora_32",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=2",
    "trainer.save_freq=20",
    "trainer.test_freq=300",
    "trainer.total_training_steps=300",
    "trainer.val_before_train=False",
]

# swe/train_swe_r2e_gym_tools_32B.slurm
TRAIN_SWE_R2E_GYM_TOOLS_32B_SLURM = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/os/r2e-gym-lite.json",
    "data.val_files=./data/rlhf/os/r2e-gym-lite.json",
    "data.val_batch_size=512",
    "data.train_batch_size=16",
    "agent.train_on_last_turn=False",
    "agent.use_agent=True",
    'agent.init_config.system_prompt="' + SWE_PROMPT + '"',
    "agent.init_config.agent_type=qwen3coder_swe",
    "agent.init_config.model_name_or_path=Qwen/Qwen3-32B",
    "agent.init_config.template=qwen-xml-think",
    "agent.init_config.max_model_len=40960",
    "agent.init_config.tool_parser_name=qwen3_coder",
    "agent.init_config.tools=[create_file,read_file,edit_file,grep_search,undo_edit,run_python]",
    "agent.init_config.reward_name=r2e_gym_reward",
    "agent.run_config.generation_config.max_tokens=4096",
    "agent.run_config.max_turns=30",
    "agent.run_config.num_chains=8",
    "agent.run_config.max_concurrent_chains=48",
    "agent.run_config.context_config.resource_backend=ray",
    "actor_rollout_ref.model.path=Qwen/Qwen3-32B",
    "actor_rollout_ref.actor.optim.lr=4e-7",
    "actor_rollout_ref.model.use_remove_padding=True",
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.01",
    "actor_rollout_ref.actor.ppo_mini_batch_size=128",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=True",
    "actor_rollout_ref.model.enable_activation_offload=True",
    "actor_rollout_ref.actor.fsdp_config.param_offload=False",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size=4",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen3-32B",
    "critic.ppo_mini_batch_size=16",
    "critic.ppo_micro_batch_size_per_gpu=1",
    "critic.model.enable_activation_offload=True",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Resource",
    "trainer.experiment_name=swe_r2e_gym_tools_Qwen3-32B_system",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=4",
    "trainer.save_freq=20",
    "trainer.test_freq=300",
    "trainer.total_training_steps=300",
    "trainer.val_before_train=False",
]

# vqa/run_vlm_qa.sh: its asyncdense_retrieve reads AgentFly's fixed cache files (e5_Flat.index,
# wiki-18.jsonl, intfloat/e5-base-v2), which agentfly takes as settings the script does not give
# (agent.init_config.tool_config.async_dense_retrieve.index_path, corpus_path, encoder_path)
RUN_VLM_QA = [
    "algorithm.adv_estimator=reinforce_plus_plus",
    "data.train_files=./data/rlhf/qa/infoseek_train.json",
    "data.val_files=./data/rlhf/qa/infoseek_val.json",
    "agent.num_chains=1",
    "data.val_batch_size=512",
    "data.train_batch_size=512",
    "agent.use_agent=True",
    "agent.model_name_or_path=Qwen/Qwen2.5-VL-3B-Instruct",
    "agent.template=qwen2.5-vl",
    "agent.max_turns=5",
    "agent.agent_type=react",
    "agent.tools=[asyncdense_retrieve,answer_qa]",
    "agent.reward_name=infoseek_reward",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-VL-3B-Instruct",
    "actor_rollout_ref.actor.optim.lr=5e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.trust_remote_code=True",
    "actor_rollout_ref.actor.ppo_mini_batch_size=512",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.response_length=512",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen2.5-VL-3B-Instruct",
    "critic.ppo_mini_batch_size=512",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Open",
    "trainer.experiment_name=vlm_search_agent",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=50",
    "trainer.test_freq=2000",
    "trainer.total_training_steps=200",
    "trainer.val_before_train=False",
]

# webshop/train_webshop.sh: the key reference's WebShop command is this script, word for word
TRAIN_WEBSHOP = KEY_REFERENCE_WEBSHOP

# webshop/train_webshop.slurm
TRAIN_WEBSHOP_SLURM = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/webshop/webshop_goals_train.json",
    "data.val_files=./data/rlhf/webshop/webshop_goals_val.json",
    "data.val_batch_size=512",
    "data.train_batch_size=64",
    "agent.use_agent=True",
    "agent.init_config.agent_type=action",
    'agent.init_config.system_prompt="' + WEBSHOP_SYSTEM_PROMPT + '"',
    "agent.init_config.max_model_len=16384",
    "agent.init_config.tools=[webshop_browser_action]",
    "agent.init_config.template=action-agent",
    "agent.init_config.model_name_or_path=Qwen/Qwen2.5-7B-Instruct",
    "agent.init_config.reward_name=webshop_reward",
    "agent.run_config.generation_config.max_tokens=384",
    "agent.run_config.max_turns=15",
    "agent.run_config.num_chains=8",
    "actor_rollout_ref.actor.optim.lr=5e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.01",
    "actor_rollout_ref.actor.ppo_mini_batch_size=512",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.60",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen2.5-7B-Instruct",
    "critic.ppo_mini_batch_size=32",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Open",
    "trainer.experiment_name=webshop_Qwen2.5-7B-Instruct_grpo",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=2",
    "trainer.save_freq=100",
    "trainer.test_freq=200",
    "trainer.total_training_steps=200",
    "trainer.val_before_train=False",
]

# webshop/train_webshop_ray.sh
TRAIN_WEBSHOP_RAY = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=./data/rlhf/webshop/webshop_goals_train.json",
    "data.val_files=./data/rlhf/webshop/webshop_goals_val.json",
    "data.val_batch_size=512",
    "data.train_batch_size=64",
    "agent.use_agent=True",
    "agent.init_config.agent_type=action",
    'agent.init_config.system_prompt="' + WEBSHOP_SYSTEM_PROMPT + '"',
    "agent.init_config.max_model_len=16384",
    "agent.init_config.tools=[webshop_browser_action]",
    "agent.init_config.template=action-agent",
    "agent.init_config.model_name_or_path=Qwen/Qwen2.5-7B-Instruct",
    "agent.init_config.reward_name=webshop_reward",
    "agent.run_config.generation_config.max_tokens=384",
    "agent.run_config.max_turns=15",
    "agent.run_config.num_chains=8",
    "actor_rollout_ref.actor.optim.lr=5e-7",
    "actor_rollout_ref.model.use_remove_padding=False",
    "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct",
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.01",
    "actor_rollout_ref.actor.ppo_mini_batch_size=512",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.actor.use_kl_loss=True",
    "actor_rollout_ref.actor.kl_loss_coef=0.001",
    "actor_rollout_ref.actor.kl_loss_type=mse",
    "actor_rollout_ref.actor.entropy_coeff=0.001",
    "actor_rollout_ref.model.enable_gradient_checkpointing=False",
    "actor_rollout_ref.actor.fsdp_config.param_offload=True",
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.60",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    "critic.model.path=Qwen/Qwen2.5-7B-Instruct",
    "critic.ppo_mini_batch_size=32",
    "critic.ppo_micro_batch_size_per_gpu=2",
    "algorithm.kl_ctrl.kl_coef=0.001",
    "trainer.critic_warmup=0",
    "trainer.logger=[console,wandb]",
    "trainer.project_name=Open",
    "trainer.experiment_name=webshop_Qwen2.5-7B-Instruct_grpo_test",
    "trainer.n_gpus_per_node=8",
    "trainer.nnodes=1",
    "trainer.save_freq=100",
    "trainer.test_freq=300",
    "trainer.total_training_steps=200",
    "trainer.val_before_train=False",
]


SCRIPTS = [
    {"script": "train_example.sh", "args": TRAIN_EXAMPLE, "env": {}, "missing": None},
    {"script": "alfworld/train_alfworld.sh", "args": TRAIN_ALFWORLD, "env": {}, "missing": "empty generation_config.max_tokens (max_new_tokens_per_turn never set); past it, the alfworld package and game files"},
    {"script": "alfworld/train_alfworld_ray.sh", "args": TRAIN_ALFWORLD_RAY, "env": {}, "missing": "the alfworld package and its game files (alfworld-download) are not installed here"},
    {"script": "run_gui_agent.sh", "args": RUN_GUI_AGENT, "env": {}, "missing": None},
    {"script": "scienceworld/train_science_world.sh", "args": TRAIN_SCIENCE_WORLD, "env": {}, "missing": None},
    {"script": "scienceworld/train_science_world.slurm", "args": TRAIN_SCIENCE_WORLD_SLURM, "env": {}, "missing": None},
    {"script": "scienceworld/train_science_world_qwen35_ray.slurm", "args": TRAIN_SCIENCE_WORLD_QWEN35_RAY_SLURM, "env": {}, "missing": "Ulysses sequence parallelism 4; use_remove_padding=True"},
    {"script": "scienceworld/train_science_world_ray.sh", "args": TRAIN_SCIENCE_WORLD_RAY, "env": {"SSPO_MULTITURN_VALUE_POSITION": "first_response"}, "missing": None},
    {"script": "search/train_search_r1.sh", "args": TRAIN_SEARCH_R1, "env": {}, "missing": None},
    {"script": "search/train_search_r1_ray.sh", "args": TRAIN_SEARCH_R1_RAY, "env": {"SSPO_MULTITURN_VALUE_POSITION": "first_response"}, "missing": "the sspo_multiturn advantage estimator: its code (AgentFly's verl submodule at 001f000) is in no published branch, so it is refused, not guessed"},
    {"script": "search/train_tool_call_ray.sh", "args": TRAIN_TOOL_CALL_RAY, "env": {}, "missing": None},
    {"script": "simuscene/train_simuscene.slurm", "args": TRAIN_SIMUSCENE_SLURM, "env": {"VLM_MODELS": "Qwen/Qwen3-VL-235B-A22B-Instruct,OpenGVLab/InternVL3_5-241B-A28B,zai-org/GLM-4.6V", "VLM_SERVER_IPS": "<vlm-server-1>,<vlm-server-2>,<vlm-server-3>"}, "missing": "vlm_as_judge_pass_reward_multi_model: its VLM judge servers are configured, but agentfly has no client for a judge service nor the video renderer"},
    {"script": "swe/train_swe_r2e_gym.sh", "args": TRAIN_SWE_R2E_GYM, "env": {}, "missing": "r2e_gym_reward (an R2E-Gym image per row), empty template, Ulysses 2, use_remove_padding=True"},
    {"script": "swe/train_swe_r2e_gym.slurm", "args": TRAIN_SWE_R2E_GYM_SLURM, "env": {"ENROOT_IMAGES_PATH": "/path/to/enroot/images/r2e-gym-lite"}, "missing": "r2e_gym_reward (an R2E-Gym image per row), Ulysses 2, use_remove_padding=True"},
    {"script": "swe/train_swe_r2e_gym_tools.slurm", "args": TRAIN_SWE_R2E_GYM_TOOLS_SLURM, "env": {"ENROOT_IMAGES_PATH": "/path/to/enroot/images/r2e-gym-lite", "SSPO_MULTITURN_VALUE_POSITION": "first_response"}, "missing": "r2e_gym_reward (an R2E-Gym image per row), Ulysses 4, use_remove_padding=True"},
    {"script": "swe/train_swe_r2e_gym_tools_32B.slurm", "args": TRAIN_SWE_R2E_GYM_TOOLS_32B_SLURM, "env": {"ENROOT_IMAGES_PATH": "/path/to/enroot/images/r2e-gym-lite"}, "missing": "r2e_gym_reward (an R2E-Gym image per row), Ulysses 4, use_remove_padding=True"},
    {"script": "vqa/run_vlm_qa.sh", "args": RUN_VLM_QA, "env": {}, "missing": None},
    {"script": "webshop/train_webshop.sh", "args": TRAIN_WEBSHOP, "env": {}, "missing": None},
    {"script": "webshop/train_webshop.slurm", "args": TRAIN_WEBSHOP_SLURM, "env": {}, "missing": None},
    {"script": "webshop/train_webshop_ray.sh", "args": TRAIN_WEBSHOP_RAY, "env": {}, "missing": None},
]
